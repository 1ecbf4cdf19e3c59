//! The store's [`Landing`]: reads through the engine into the slab (gate and up in one
//! request, down in a second), each ticket's watch handed to the completer thread, which wakes
//! and lets the loader harvest when a read is over. Failed reads are kept for the store to
//! give to the holders waiting on them.

use crate::decode::slots::{read_bytes, Landing, Miss, Started};
use crate::decode::{DecodeError, LoadError};
use crate::device::DeviceBuffer;
use crate::engine::{Engine, EngineError, ReadRequest, Ticket, TicketWatch};
use crate::expert_cache::{layout::KINDS, ExpertKey, SliceRead, SlotId};
use crossbeam_channel::Sender;
use std::sync::Arc;

pub(super) struct StoreLanding {
    pub(super) engine: Arc<Engine>,
    pub(super) slab: Arc<DeviceBuffer>,
    pub(super) slot_bytes: usize,
    /// To the completer (`None` once the store is being dropped).
    pub(super) watches: Option<Sender<TicketWatch>>,
    /// Reads that failed since the store last looked: slot and error.
    pub(super) failures: Vec<(SlotId, Arc<EngineError>)>,
    /// The error of the last fill that could not start (the store names the expert).
    pub(super) start_error: Option<Arc<EngineError>>,
}

pub(super) struct StoreFill {
    key: ExpertKey,
    slot: SlotId,
    gate_up: Option<Ticket>,
    down: Option<Ticket>,
    down_at: SliceRead,
    base: usize,
}

impl StoreLanding {
    fn request(&self, key: ExpertKey, i: usize, r: &SliceRead, base: usize) -> ReadRequest {
        let label = format!(
            "blk.{}.ffn_{}_exps expert {}",
            key.layer,
            KINDS[i].as_str(),
            key.expert
        );
        ReadRequest::new(r.offset, r.len(), Arc::clone(&self.slab), r.at(base)).with_label(label)
    }

    fn submit(&mut self, reqs: Vec<ReadRequest>) -> Result<Ticket, DecodeError> {
        match self.engine.submit(reqs) {
            Ok(t) => {
                if let Some(tx) = &self.watches {
                    // The completer lives as long as the sender (joined after it is closed).
                    let _ = tx.send(t.watch());
                }
                Ok(t)
            }
            Err(e) => {
                let msg = e.to_string();
                self.start_error = Some(Arc::new(e));
                Err(LoadError::Read(msg).into())
            }
        }
    }
}

impl Landing for StoreLanding {
    type Fill = StoreFill;

    fn start(&mut self, m: &Miss) -> Result<Started<StoreFill>, DecodeError> {
        let base = m.slot as usize * self.slot_bytes;
        let reqs = vec![
            self.request(m.key, 0, &m.reads[0], base),
            self.request(m.key, 1, &m.reads[1], base),
        ];
        let t = self.submit(reqs)?;
        let fill = StoreFill {
            key: m.key,
            slot: m.slot,
            gate_up: Some(t),
            down: None,
            down_at: m.reads[2],
            base,
        };
        Ok(Started {
            fill,
            read_bytes: read_bytes(m),
        })
    }

    fn queue_down(&mut self, f: &mut StoreFill) -> Result<(), DecodeError> {
        if f.down.is_none() {
            let req = self.request(f.key, 2, &f.down_at, f.base);
            match self.submit(vec![req]) {
                Ok(t) => f.down = Some(t),
                Err(e) => {
                    // Its holders must hear of it (the loader fails the slot).
                    if let Some(err) = self.start_error.clone() {
                        self.failures.push((f.slot, err));
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// A fill whose down could not be queued counts as landed: the loader's `ready` queues it
    /// again or fails the slot.
    fn poll(&mut self, f: &mut StoreFill) -> bool {
        f.gate_up.as_ref().is_none_or(Ticket::is_done)
            && f.down.as_ref().is_none_or(Ticket::is_done)
    }

    fn finish(&mut self, slot: SlotId, mut f: StoreFill) -> Result<(), DecodeError> {
        let r = match (f.gate_up.take(), f.down.take()) {
            (Some(g), Some(d)) => g.wait().and(d.wait()),
            (Some(g), None) => g.wait(),
            (None, Some(d)) => d.wait(),
            (None, None) => Ok(()),
        };
        r.map_err(|e| {
            let msg = e.to_string();
            self.failures.push((slot, Arc::new(e)));
            LoadError::Read(msg).into()
        })
    }

    fn abandon(&mut self, _f: StoreFill) {}
}
