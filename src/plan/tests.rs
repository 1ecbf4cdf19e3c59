//! The planner's arithmetic on the Flash file's sizes (the generated flash layout, equal to
//! DS4_TENSORS.md's table; tests/plan_cli.rs checks them against a generated file).

use super::rules::*;
use super::*;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
/// Strix Halo's GPU-visible memory, round(107.87 × 2^30).
const STRIX: u64 = 115_824_530_555;

fn flash() -> ModelSizes {
    ModelSizes {
        resident_bytes: 8_801_384_796,
        routed_bytes: 77_913_391_104,
        expert_bytes: 7_077_888,
        n_experts: 43 * 256,
        min_cache_experts: 6,
        q8_f16_bytes: 12_421_431_296,
        ctx_limit: 1 << 20,
    }
}

fn input(total: u64, platform: Platform, ctx: Option<u64>, streaming: bool) -> PlanInput {
    PlanInput {
        device_total: total,
        device_free: None,
        device_source: Source::Flag,
        platform,
        ctx,
        prefill_chunk: 4096,
        streaming,
        cache: CacheRequest::Auto,
        ram_tier: 0,
        simulate_used: 0,
        staging_bytes: 128 * MIB,
        model: flash(),
    }
}

fn get<'a>(p: &'a Plan, what: &str) -> &'a Line {
    p.lines.iter().find(|l| l.what == what).unwrap()
}

#[test]
fn flash_sizes_match_ds4_tensors() {
    let m = flash();
    // DS4_TENSORS.md: 72.562 GiB routed, 8.197 GiB resident, 80.759 GiB in all.
    assert_eq!(m.routed_bytes, 11_008 * 7_077_888);
    assert!((m.resident_bytes as f64 / GIB as f64 - 8.197).abs() < 0.0005);
    assert!(((m.resident_bytes + m.routed_bytes) as f64 / GIB as f64 - 80.759).abs() < 0.0005);
    // Q8_0 is 34 B per 32 weights; its F16 copy 64 B: 6.146 GiB of Q8_0 -> 11.568 GiB.
    assert!((m.q8_f16_bytes as f64 / GIB as f64 - 6.146 * 64.0 / 34.0).abs() < 0.001);
}

#[test]
fn strix_halo_admits_229376_refuses_245760() {
    let ok = plan(&input(STRIX, Platform::Windows, Some(229_376), false)).unwrap();
    assert!(ok.fits, "{}", ok.summary());
    assert_eq!(ok.max_ctx, 237_553);
    assert_eq!(get(&ok, Q8_LINE).bytes, STRIX / 20); // max(4 GiB, 5 %) = 5.39 GiB
    assert_eq!(get(&ok, "resident weights").bytes, 86_714_775_900);
    let bad = plan(&input(STRIX, Platform::Windows, Some(245_760), false)).unwrap();
    assert!(!bad.fits);
    let m = bad.misfit.as_ref().unwrap();
    assert_eq!(m.line, KV_LINE);
    assert_eq!(m.needs, 245_760 * 21_952);
    assert_eq!(m.over, bad.device_used - STRIX);
    assert!(m.over > 0 && m.over < 256 * MIB, "{}", m.describe());
    // The limit itself fits, one token more does not.
    assert!(
        plan(&input(STRIX, Platform::Windows, Some(237_553), false))
            .unwrap()
            .fits
    );
    assert!(
        !plan(&input(STRIX, Platform::Windows, Some(237_554), false))
            .unwrap()
            .fits
    );
}

/// docs/PLANNER.md's derivation: the headroom lies between what ctx 245,760 (failed) and
/// 229,376 (worked) leave with the other lines, and is their midpoint rounded to a MiB.
#[test]
fn fragmentation_headroom_derivation() {
    let m = flash();
    let fixed = WINDOWS_DRIVER_RESERVE
        + m.resident_bytes
        + m.routed_bytes
        + m.q8_f16_bytes.min(q8_f16_reserve(STRIX, false));
    let per = KV_BYTES_PER_TOKEN + 2 * 4096;
    let hi = STRIX - fixed - 229_376 * per;
    let lo = STRIX - fixed - 245_760 * per;
    assert!(lo < WINDOWS_FRAGMENTATION_HEADROOM && WINDOWS_FRAGMENTATION_HEADROOM <= hi);
    let mid = (lo + hi) / 2;
    assert_eq!(WINDOWS_FRAGMENTATION_HEADROOM, (mid + MIB / 2) / MIB * MIB);
    // Published: 11.67 GiB driver, 107.87 GiB device.
    assert_eq!(WINDOWS_DRIVER_RESERVE, (11.67 * GIB as f64).round() as u64);
    assert_eq!(STRIX, (107.87 * GIB as f64).round() as u64);
}

#[test]
fn q8_reserve_rule() {
    assert_eq!(q8_f16_reserve(24 * GIB, true), 16 * GIB);
    assert_eq!(q8_f16_reserve(141 * GIB, false), 512 * MIB);
    assert_eq!(q8_f16_reserve(112 * GIB, false), 512 * MIB);
    assert_eq!(q8_f16_reserve(64 * GIB, false), 4 * GIB);
    assert_eq!(q8_f16_reserve(STRIX, false), STRIX / 20);
}

#[test]
fn cache_flag_reads_gb_as_gib() {
    assert_eq!(parse_cache_flag("4854"), Ok(CacheRequest::Experts(4854)));
    assert_eq!(parse_cache_flag("32GB"), Ok(CacheRequest::Bytes(32 * GIB)));
    assert_eq!(parse_cache_flag("32gb"), Ok(CacheRequest::Bytes(32 * GIB)));
    assert_eq!(parse_cache_flag("32GiB"), Ok(CacheRequest::Bytes(32 * GIB)));
    assert_eq!(
        parse_cache_flag("512MB"),
        Ok(CacheRequest::Bytes(512 * MIB))
    );
    assert_eq!(
        parse_cache_flag("1.5GB"),
        Ok(CacheRequest::Bytes(1536 * MIB))
    );
    assert!(parse_cache_flag("32 parsecs").is_err());
    assert!(parse_cache_flag("").is_err());
    assert!(parse_cache_flag("-3").is_err());
    let mut i = input(64 * GIB, Platform::Linux, None, true);
    i.cache = parse_cache_flag("32GB").unwrap();
    let p = plan(&i).unwrap();
    assert_eq!(p.cache_experts, 4854); // floor(32 × 2^30 / 7,077,888)
    assert_eq!(get(&p, CACHE_LINE).source, Source::Flag);
    // The flag sized the cache, so the Q8->F16 cache keeps only the non-streaming reserve
    // free (4 GiB here) and gets its full size.
    assert_eq!(get(&p, Q8_LINE).bytes, flash().q8_f16_bytes);
}

#[test]
fn card_24gb_streaming_leaves_weights_and_kv_room() {
    for total in [24 * GIB, 24_000_000_000] {
        let p = plan(&input(total, Platform::Linux, None, true)).unwrap();
        assert!(p.fits, "{}", p.summary());
        assert_eq!(p.ctx, DEFAULT_CTX);
        let cache = get(&p, CACHE_LINE).bytes;
        assert_eq!(cache, p.cache_experts * 7_077_888);
        assert!(p.cache_experts > 1000, "{}", p.summary());
        assert!(p.cache_experts < 11_008);
        // The Q8->F16 cache leaves 16 GiB for the experts: on 24 GB it gets nothing.
        assert_eq!(get(&p, Q8_LINE).bytes, 0);
        let kv = get(&p, KV_LINE).bytes;
        assert_eq!(kv, DEFAULT_CTX * 21_952);
        let w = get(&p, "resident weights").bytes;
        assert_eq!(w, flash().resident_bytes);
        assert!(w + kv + cache + get(&p, HEADROOM_LINE).bytes <= total);
        assert!(p.device_used <= total);
        // What is left is less than one more expert.
        assert!(total - p.device_used < 7_077_888);
    }
}

#[test]
fn big_device_streaming_caches_everything_and_the_q8_cache() {
    let p = plan(&input(140 * GIB, Platform::Linux, None, true)).unwrap();
    assert!(p.fits);
    assert_eq!(p.cache_experts, 11_008);
    assert_eq!(get(&p, Q8_LINE).bytes, flash().q8_f16_bytes);
}

#[test]
fn measured_free_and_simulated_use_lower_the_budget() {
    // 24 GiB: the Q8->F16 cache gets nothing, so every byte less is expert cache less.
    let mut i = input(24 * GIB, Platform::Linux, Some(8192), true);
    let base = plan(&i).unwrap().cache_experts;
    i.device_free = Some(22 * GIB);
    i.device_source = Source::Measured;
    let measured = plan(&i).unwrap();
    assert_eq!(get(&measured, "in use before the run").bytes, 2 * GIB);
    i.simulate_used = 4 * GIB;
    let sim = plan(&i).unwrap();
    assert!(sim.cache_experts < measured.cache_experts && measured.cache_experts < base);
    assert_eq!(measured.cache_experts, base - (2 * GIB).div_ceil(7_077_888));
    // On 32 GiB the Q8->F16 cache takes what exceeds the 16 GiB it leaves the experts: a
    // smaller budget shrinks it first.
    let mut j = input(32 * GIB, Platform::Linux, Some(8192), true);
    let a = plan(&j).unwrap();
    j.simulate_used = 2 * GIB;
    let b = plan(&j).unwrap();
    assert_eq!(a.cache_experts, b.cache_experts);
    assert_eq!(get(&a, Q8_LINE).bytes - get(&b, Q8_LINE).bytes, 2 * GIB);
    assert_eq!(get(&sim, "simulated used memory").source, Source::Flag);
    // Simulating more than the device: the simulated line is the one that does not fit.
    i.simulate_used = 23 * GIB;
    let p = plan(&i).unwrap();
    assert_eq!(p.misfit.unwrap().line, "simulated used memory");
}

#[test]
fn too_small_device_names_the_first_line_over() {
    let p = plan(&input(4 * GIB, Platform::Linux, None, true)).unwrap();
    assert!(!p.fits);
    assert_eq!(p.max_ctx, 0);
    assert_eq!(p.misfit.unwrap().line, "resident weights");
    // A flag cache too big for the device.
    let mut i = input(24 * GIB, Platform::Linux, Some(4096), true);
    i.cache = CacheRequest::Experts(11_008);
    let p = plan(&i).unwrap();
    assert_eq!(p.misfit.unwrap().line, CACHE_LINE);
}

#[test]
fn misfit_says_the_line_short_and_the_plan_over_apart() {
    // Resident weights do not fit 4 GiB, and every line after them adds to the plan's excess.
    let p = plan(&input(4 * GIB, Platform::Linux, None, true)).unwrap();
    let m = p.misfit.unwrap();
    assert_eq!(m.short, m.needs - m.left);
    assert!(m.over > m.short, "{m:?}");
    let text = m.describe();
    let short = format!("this line is {} short", crate::units::human_bytes(m.short));
    let over = format!("the whole plan {} over", crate::units::human_bytes(m.over));
    assert!(text.contains(&short) && text.contains(&over), "{text}");
}

#[test]
fn bad_input() {
    assert_eq!(
        plan(&input(0, Platform::Linux, None, false)),
        Err(PlanError::ZeroDevice)
    );
    assert!(matches!(
        plan(&input(GIB, Platform::Linux, Some(1 << 40), false)),
        Err(PlanError::Ctx { .. })
    ));
    assert!(matches!(
        plan(&input(GIB, Platform::Linux, Some(0), false)),
        Err(PlanError::Ctx { .. })
    ));
    let mut i = input(GIB, Platform::Linux, None, false);
    i.prefill_chunk = 0;
    assert_eq!(plan(&i), Err(PlanError::PrefillChunk(0)));
    i.prefill_chunk = 4096;
    i.device_free = Some(2 * GIB);
    assert!(matches!(plan(&i), Err(PlanError::FreeAboveTotal { .. })));
    // Huge but valid numbers do not overflow.
    let p = plan(&input(u64::MAX, Platform::Windows, Some(1 << 20), false)).unwrap();
    assert!(p.fits);
    assert_eq!(p.max_ctx, 1 << 20);
}

#[test]
fn host_lines_are_not_device_memory() {
    let mut i = input(STRIX, Platform::Windows, Some(229_376), false);
    let a = plan(&i).unwrap();
    i.ram_tier = 64 * GIB;
    let b = plan(&i).unwrap();
    assert_eq!(a.device_used, b.device_used);
    assert_eq!(get(&b, "RAM tier").side, Side::Host);
    assert_eq!(get(&b, "staging ring").bytes, 128 * MIB);
}
