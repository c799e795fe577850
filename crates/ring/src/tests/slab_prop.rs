//! Random operation sequences against a simple model (a map from ID to value).

use super::slab_unit::Tiny;
use crate::{EventId, Miss, TaggedSlab};
use proptest::prelude::*;
use std::collections::HashMap;

#[derive(Debug, Clone)]
enum Op {
    Insert(u32),
    Get(usize),
    Retire(usize),
    RetireOld(usize),
    Garbage(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => any::<u32>().prop_map(Op::Insert),
        2 => any::<usize>().prop_map(Op::Get),
        2 => any::<usize>().prop_map(Op::Retire),
        1 => any::<usize>().prop_map(Op::RetireOld),
        1 => any::<u64>().prop_map(Op::Garbage),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// On a 4-slot, 2-generation-bit slab (wrap-around reached within a few
    /// dozen operations), the slab agrees with the model on every step and
    /// never accepts an ID the model considers dead.
    #[test]
    fn slab_matches_model(ops in proptest::collection::vec(op(), 1..300)) {
        let slab: TaggedSlab<u32, Tiny> = TaggedSlab::with_tag(4, 2);
        let mut live: Vec<(EventId, u32)> = Vec::new();
        let mut dead: Vec<EventId> = Vec::new();
        let mut all: HashMap<EventId, u32> = HashMap::new();
        for op in ops {
            match op {
                Op::Insert(v) => match slab.insert(v) {
                    Ok(id) => {
                        prop_assert!(!all.contains_key(&id), "ID {id:?} minted twice");
                        all.insert(id, v);
                        live.push((id, v));
                    }
                    Err(full) => prop_assert_eq!(full.0, v),
                },
                Op::Get(i) if !live.is_empty() => {
                    let (id, v) = live[i % live.len()];
                    prop_assert_eq!(slab.with(id, |x| *x), Ok(v));
                }
                Op::Retire(i) if !live.is_empty() => {
                    let (id, v) = live.swap_remove(i % live.len());
                    prop_assert_eq!(slab.retire_with(id, |x| *x), Some(v));
                    dead.push(id);
                }
                Op::RetireOld(i) if !dead.is_empty() => {
                    let id = dead[i % dead.len()];
                    prop_assert_eq!(slab.retire_with(id, |x| *x), None);
                    prop_assert_eq!(slab.check(id), Err(Miss::Stale));
                }
                Op::Garbage(raw) => {
                    if let Some(id) = EventId::from_raw(raw) {
                        if !live.iter().any(|(l, _)| *l == id) {
                            prop_assert!(slab.check(id).is_err());
                        }
                    }
                }
                _ => {}
            }
            prop_assert_eq!(slab.live(), live.len() as u64);
        }
        for id in &dead {
            prop_assert!(slab.check(*id).is_err());
        }
    }
}
