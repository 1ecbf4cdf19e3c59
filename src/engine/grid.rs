//! The chunk grid: how a request is cut into chunks (staged: windows of the slot size on a
//! grid anchored at the request's offset rounded down to [`GRID_ALIGN`]; host-visible: the same
//! with a short tail merged), and how a staged chunk is widened to the direct-IO alignment.
//! Pure functions, shared by the dispatcher (`pipeline.rs`), the engine's sizing and the fuzzer.

/// Alignment the chunk grid is anchored to: a request's chunks are windows of `chunk` bytes
/// starting at its offset rounded down to this, so every chunk but the first starts aligned and
/// a staged chunk widened to the direct-IO alignment (512 or 4096) still fits its slot.
pub const GRID_ALIGN: u64 = 4096;

/// Start of the chunk grid of a request at `offset`: `offset` rounded down to `align`.
fn anchor(offset: u64, align: u64) -> u64 {
    offset - offset % align.max(1)
}

/// Number of chunks `[offset, offset + len)` splits into when chunks are the windows
/// `[a + k*chunk, a + (k+1)*chunk)` with `a` = offset rounded down to `align`.
pub fn chunk_count(offset: u64, len: usize, chunk: usize, align: u64) -> u64 {
    if len == 0 {
        return 0;
    }
    let a = anchor(offset, align);
    let last = offset + (len as u64 - 1); // validated: offset + len <= file length
    (last - a) / chunk as u64 + 1
}

/// The chunks of one item (see [`chunk_count`]): (file offset, length, offset into the item).
/// A request of at most `chunk - (offset % align)` bytes is one chunk: one read.
pub fn chunks(
    offset: u64,
    len: usize,
    chunk: usize,
    align: u64,
) -> impl Iterator<Item = (u64, usize, usize)> {
    let end = offset + len as u64;
    let c = chunk as u64;
    let a = anchor(offset, align);
    let mut pos = offset;
    std::iter::from_fn(move || {
        if pos >= end {
            return None;
        }
        let next = a
            .saturating_add(((pos - a) / c + 1).saturating_mul(c))
            .min(end);
        let item = (pos, (next - pos) as usize, (pos - offset) as usize);
        pos = next;
        Some(item)
    })
}

/// Chunks of a read into host-visible memory, which has no slot to fit: like [`chunks`], but a
/// last window shorter than a quarter chunk joins the one before it (up to 1.25 chunks), so a
/// request slightly longer than a chunk (e.g. a `read_bytes` widened to 4096) is one read, not a
/// chunk and a sliver. Windows still split long requests so several workers share them.
pub fn host_chunk_count(offset: u64, len: usize, chunk: usize, align: u64) -> u64 {
    let n = chunk_count(offset, len, chunk, align);
    if merges_tail(offset, len, chunk, align, n) {
        n - 1
    } else {
        n
    }
}

/// The chunks of [`host_chunk_count`]: (file offset, length, offset into the item).
pub fn host_chunks(
    offset: u64,
    len: usize,
    chunk: usize,
    align: u64,
) -> impl Iterator<Item = (u64, usize, usize)> {
    let n = chunk_count(offset, len, chunk, align);
    let merge = merges_tail(offset, len, chunk, align, n);
    let end = offset + len as u64;
    let keep = if merge { n - 1 } else { n };
    chunks(offset, len, chunk, align)
        .take(usize::try_from(keep).unwrap_or(usize::MAX))
        .enumerate()
        .map(move |(i, (o, l, rel))| {
            if merge && i as u64 == keep - 1 {
                (o, (end - o) as usize, rel)
            } else {
                (o, l, rel)
            }
        })
}

fn merges_tail(offset: u64, len: usize, chunk: usize, align: u64, n: u64) -> bool {
    if n < 2 {
        return false;
    }
    let a = anchor(offset, align);
    let last_start = a + (n - 1) * chunk as u64; // > offset since n >= 2
    let last_len = offset + len as u64 - last_start;
    last_len < (chunk / 4) as u64
}

/// The file range a staged chunk `[offset, offset + len)` is read as: widened to `align` (the
/// handle's direct-IO alignment) so the unbuffered path applies, never past `file_len`, and only
/// when the widened range fits a slot of `slot_len` bytes (else the chunk itself).
pub fn widen(
    offset: u64,
    len: usize,
    align: Option<usize>,
    file_len: u64,
    slot_len: usize,
) -> (u64, u64) {
    let (start, end) = (offset, offset + len as u64);
    match align {
        Some(a) if a.is_power_of_two() => {
            let m = a as u64 - 1;
            let r0 = start & !m;
            let r1 = end.checked_add(m).map_or(end, |e| e & !m).min(file_len);
            if r1 - r0 <= slot_len as u64 {
                (r0, r1)
            } else {
                (start, end)
            }
        }
        _ => (start, end),
    }
}

/// Smallest head piece the ramp cuts (see [`ramp_head`]).
pub const RAMP_MIN_HEAD: usize = 64 << 10;

/// The ramp's head piece of a staged read of `n` bytes that starts while `j` other staged
/// chunks are in flight on `workers` readers: the first `(j + 1) / (workers + 1)` of the read,
/// rounded up to `unit` (the piece alignment, a power of two) and at least [`RAMP_MIN_HEAD`];
/// 0 (no cut) when `j >= workers` or the head would not be shorter than the read. Readers that
/// start together on an idle link so finish their heads one after another, and the link copies
/// the first heads while the rest are still being read.
pub fn ramp_head(n: usize, j: usize, workers: usize, unit: usize) -> usize {
    if j >= workers || n == 0 {
        return 0;
    }
    let unit = unit.max(1);
    let share = (n as u128 * (j as u128 + 1) / (workers as u128 + 1)) as usize;
    let head = share.max(RAMP_MIN_HEAD).div_ceil(unit).saturating_mul(unit);
    if head < n {
        head
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_tile_the_range_on_a_grid_anchored_at_the_request() {
        for (off, len, c, a) in [
            (0u64, 10usize, 4usize, 4u64),
            (3, 10, 4, 4),
            (4, 8, 4, 4),
            (7, 1, 4, 4),
            ((1 << 32) - 5, 20, 8, 8),
            (5, 0, 4, 4),
            (4096 * 3 + 17, 3 << 20, 1 << 20, 4096),
            (123, 999, 64, 1),
        ] {
            let v: Vec<_> = chunks(off, len, c, a).collect();
            assert_eq!(
                v.len() as u64,
                chunk_count(off, len, c, a),
                "{off} {len} {c}"
            );
            let base = off - off % a;
            let mut pos = off;
            for &(o, l, rel) in &v {
                assert_eq!(o, pos);
                assert_eq!(rel as u64, o - off);
                assert!(l > 0 && l <= c);
                // Every chunk but the first starts on the grid, and none crosses a window.
                assert!(o == off || (o - base) % c as u64 == 0);
                assert_eq!((o - base) / c as u64, (o + l as u64 - 1 - base) / c as u64);
                pos += l as u64;
            }
            assert_eq!(pos, off + len as u64);
        }
    }

    #[test]
    fn a_slot_sized_request_anywhere_in_a_block_is_one_chunk() {
        // The case strace showed as two reads: 4 MiB starting 4 KiB past a 4 MiB line.
        let (s, a) = (4usize << 20, GRID_ALIGN);
        assert_eq!(chunk_count((4 << 20) + 4096, s, s, a), 1);
        // Expert slices (2-3 MiB) at any 32-byte offset are one chunk.
        for off in [32u64, 4064, 12_345 * 32, (5 << 30) + 96] {
            assert_eq!(chunk_count(off, 2_752_512, s, a), 1, "{off}");
        }
        // Unaligned and exactly slot-sized: the remainder of the first block spills over.
        assert_eq!(chunk_count(100, s, s, a), 2);
    }

    #[test]
    fn host_chunks_merge_a_short_tail_and_tile_the_range() {
        let (s, a) = (4usize << 20, GRID_ALIGN);
        // A 4 MiB read widened by 4 KiB: one read.
        assert_eq!(host_chunk_count(4096 * 7, s + 4096, s, a), 1);
        // A long read still splits for parallelism.
        assert_eq!(host_chunk_count(0, 10 * s, s, a), 10);
        for (off, len) in [
            (0u64, 1usize),
            (4096 * 7, s + 4096),
            (3, 5 * s + 17),
            (5, 2 * s),
            (77, s / 2 * 3),
        ] {
            let v: Vec<_> = host_chunks(off, len, s, a).collect();
            assert_eq!(v.len() as u64, host_chunk_count(off, len, s, a));
            let mut pos = off;
            for &(o, l, rel) in &v {
                assert_eq!((o, rel as u64), (pos, pos - off));
                assert!(l > 0 && l <= s + s / 4, "{off} {len}: {l}");
                pos += l as u64;
            }
            assert_eq!(pos, off + len as u64, "{off} {len}");
        }
    }

    #[test]
    fn widened_reads_fit_the_slot_and_stay_in_the_file() {
        let s = 4usize << 20;
        for off in [0u64, 1, 4095, 4096, 12_345, (1 << 32) + 7] {
            for (o, l, _) in chunks(off, 3 * s + 5, s, GRID_ALIGN) {
                let (r0, r1) = widen(o, l, Some(4096), u64::MAX, s);
                assert!(r0 <= o && r1 >= o + l as u64, "covers the chunk");
                assert_eq!(r0 % 4096, 0, "starts aligned");
                assert!(r1 - r0 <= s as u64, "fits the slot");
                assert_eq!(r1 % 4096, 0);
                // 512-byte alignment fits too.
                let (q0, q1) = widen(o, l, Some(512), u64::MAX, s);
                assert!(q1 - q0 <= s as u64 && q0 % 512 == 0);
            }
        }
        // Never past the end of the file, even when that leaves the end unaligned.
        assert_eq!(widen(4000, 100, Some(4096), 4100, s), (0, 4100));
        // No alignment, or a widened range too big for the slot: the chunk as it is.
        assert_eq!(widen(5, 10, None, 100, s), (5, 15));
        assert_eq!(widen(4095, 4096, Some(4096), 1 << 20, 4096), (4095, 8191));
        assert_eq!(widen(5, 10, Some(3), 100, s), (5, 15));
    }

    #[test]
    fn ramp_heads_grow_with_the_chunks_in_flight_and_stay_aligned() {
        let (n, w, u) = (2_359_296usize, 16usize, 4096usize);
        let heads: Vec<usize> = (0..w).map(|j| ramp_head(n, j, w, u)).collect();
        assert!(heads.windows(2).all(|p| p[0] < p[1]), "{heads:?}");
        assert!(heads
            .iter()
            .all(|&h| h > 0 && h < n && h % u == 0 && h >= RAMP_MIN_HEAD));
        // About n/17 first, about 16n/17 last.
        assert!(heads[0] >= n / 17 && heads[0] < n / 17 + u);
        assert!(heads[w - 1] >= n * 16 / 17);
        // Past the first round, or where the head would be the whole read: no cut.
        assert_eq!(ramp_head(n, w, w, u), 0);
        assert_eq!(ramp_head(n, 100, w, u), 0);
        assert_eq!(ramp_head(RAMP_MIN_HEAD, 0, w, u), 0);
        assert_eq!(ramp_head(0, 0, w, u), 0);
        assert_eq!(ramp_head(100_000, 15, 16, 65_536), 0); // rounds up to the whole read
        assert_eq!(ramp_head(1 << 20, 0, 1, 4096), 512 << 10);
    }
}
