//! The v7 table and NCCL 2.31's v6 adapter, on in-process plugins: what each is given
//! (descriptor fields, KernelPhase events and state 31, the activation mask after
//! `init`).

use super::convert::tests::{addr, coll_v6, of_type};
use super::*;
use crate::scenario::nccl::{self, PHASE_NAMES, SYM_VARIANT};
use evring_abi::{phase, state, KernelChArgs};
use std::cell::RefCell;

thread_local! {
    static SEEN: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

fn seen() -> Vec<String> {
    SEEN.with(|s| std::mem::take(&mut *s.borrow_mut()))
}

fn note(s: String) {
    SEEN.with(|v| v.borrow_mut().push(s));
}

fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        return "NULL".into();
    }
    // SAFETY: the simulator's strings are static NUL-terminated literals.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

extern "C" fn init(
    ctx: *mut *mut c_void,
    _comm_id: u64,
    mask: *mut c_int,
    _name: *const c_char,
    _n_nodes: c_int,
    _nranks: c_int,
    _rank: c_int,
    _log: Logger,
) -> NcclResult {
    // SAFETY: `Plugin::init` passes the caller's valid pointers.
    unsafe {
        *ctx = addr(0xc7);
        // KernelPhase without KernelCh: NCCL turns KernelCh on for v7.
        *mask = (ty::COLL | ty::KERNEL_PHASE) as c_int;
    }
    NCCL_SUCCESS
}

extern "C" fn start_v7(_ctx: *mut c_void, h: *mut *mut c_void, d: *mut DescrV7) -> NcclResult {
    // SAFETY: `Plugin::start7` passes a valid descriptor whose selected member is set.
    let d = unsafe { &*d };
    // SAFETY: as above; only the member `d.ty` selects is read.
    let s = unsafe {
        match d.ty {
            ty::COLL_API => format!("CollApi tag={:#x}", d.u.coll_api.user_tag),
            ty::P2P_API => format!("P2pApi tag={:#x}", d.u.p2p_api.user_tag),
            ty::COLL => {
                let c = d.u.coll;
                format!(
                    "Coll seq={} tag={:#x} sym={} variant={} algo={} proto={:?}",
                    c.seq_number,
                    c.user_tag,
                    c.is_sym_coll,
                    cstr(c.kernel_variant),
                    cstr(c.algo),
                    cstr(c.proto)
                )
            }
            ty::P2P => format!("P2p tag={:#x} peer={}", d.u.p2p.user_tag, d.u.p2p.peer),
            ty::KERNEL_PHASE => {
                let k = d.u.kernel_phase;
                format!(
                    "KernelPhase parent={:?} ch={} id={} name={} t={}",
                    d.parent_obj,
                    k.channel_id,
                    k.phase_id,
                    cstr(k.phase_name),
                    k.p_timer
                )
            }
            t => format!("type {t:#x}"),
        }
    };
    note(format!("start {s}"));
    // SAFETY: valid handle slot.
    unsafe { *h = addr(0x70) };
    NCCL_SUCCESS
}

extern "C" fn start_v6(_ctx: *mut c_void, h: *mut *mut c_void, d: *mut DescrV6) -> NcclResult {
    // SAFETY: as for v7.
    let d = unsafe { &*d };
    let bytes =
        // SAFETY: the descriptor is a whole, initialised 112-byte struct (zeroed by the
        // adapter, then assigned).
        unsafe { std::slice::from_raw_parts((d as *const DescrV6).cast::<u8>(), size_of::<DescrV6>()) };
    // The padding after `rank`: zero in NCCL 2.31's adapter (`= {}`), garbage in 2.30's v5.
    note(format!(
        "start6 ty={:#x} padding_zero={}",
        d.ty,
        bytes[20..24].iter().all(|&b| b == 0)
    ));
    // SAFETY: valid handle slot.
    unsafe { *h = addr(0x60) };
    NCCL_SUCCESS
}

extern "C" fn stop(h: *mut c_void) -> NcclResult {
    note(format!("stop {h:?}"));
    NCCL_SUCCESS
}

extern "C" fn record(h: *mut c_void, s: State, a: *mut StateArgsV4) -> NcclResult {
    let t = if a.is_null() {
        "NULL".to_string()
    } else {
        // SAFETY: non-NULL args are a whole 8-byte union.
        unsafe { (*a).kernel_ch.p_timer }.to_string()
    };
    note(format!("rec {h:?} {s} {t}"));
    NCCL_SUCCESS
}

extern "C" fn finalize(_ctx: *mut c_void) -> NcclResult {
    NCCL_SUCCESS
}

fn in_process(table: Table) -> Plugin {
    Plugin {
        table,
        name: "t".into(),
        path: PathBuf::from("(in process)"),
        lib: None,
    }
}

fn v7_plugin() -> Plugin {
    in_process(Table::V7(ProfilerV7 {
        name: c"t7".as_ptr(),
        init,
        start_event: start_v7,
        stop_event: stop,
        record_event_state: record,
        finalize,
    }))
}

fn v6_plugin() -> Plugin {
    in_process(Table::V6(ProfilerV6 {
        name: c"t6".as_ptr(),
        init,
        start_event: start_v6,
        stop_event: stop,
        record_event_state: record,
        finalize,
    }))
}

fn timer(t: u64) -> StateArgsV4 {
    StateArgsV4 {
        kernel_ch: KernelChArgs { p_timer: t },
    }
}

#[test]
fn v7_gets_user_tags_symmetric_kernels_and_phases() {
    let p = v7_plugin();
    assert_eq!((p.version(), p.passes_type(ty::KERNEL_PHASE)), (7, true));
    let mut ctx = ptr::null_mut();
    let mut mask: c_int = 0;
    // SAFETY: valid out-pointers; the test plugin keeps nothing.
    unsafe { p.init(&mut ctx, 1, &mut mask, ptr::null(), 1, 2, 0, None) };
    assert_eq!(
        mask as u64,
        ty::COLL | ty::KERNEL_PHASE | ty::KERNEL_CH,
        "KernelPhase turns KernelCh on"
    );
    let ag = c"AllGather";
    let descrs = [
        nccl::coll_api(0x10, ag, 8, 0x5000, false, 0x7a90_0002),
        nccl::p2p_api(0x10, true, 8, 0x5000, false, 0x7a90_0003),
        nccl::coll(0x20, 1, 3, ag, 8, 4, 0x30, 0x7f00, 0x7a90_0002, true),
        nccl::coll(0x20, 1, 4, ag, 8, 4, 0x30, 0x7f00, 0, false),
        nccl::p2p(0x21, 1, false, 8, 0, 4, 0x30, 0x7a90_0003),
        nccl::kernel_phase(0x40, 2, phase::COMPUTE, 1000),
    ];
    let mut h = ptr::null_mut();
    for d in &descrs {
        // SAFETY: the builders initialise the selected member with static strings.
        unsafe { p.start7(ctx, &mut h, d) };
    }
    // SAFETY: `timer` initialises the whole union.
    unsafe {
        p.record(h, state::KERNEL_PHASE_STOP, &timer(1200));
        p.stop(h);
    }
    assert_eq!(
        seen(),
        [
            "start CollApi tag=0x7a900002".to_string(),
            "start P2pApi tag=0x7a900003".into(),
            format!(
                "start Coll seq=3 tag=0x7a900002 sym=true variant={} algo=R proto=\"\"",
                SYM_VARIANT.to_string_lossy()
            ),
            "start Coll seq=4 tag=0x0 sym=false variant=NULL algo=RING proto=\"SIMPLE\"".into(),
            "start P2p tag=0x7a900003 peer=0".into(),
            format!(
                "start KernelPhase parent={:?} ch=2 id=1 name={} t=1000",
                addr(0x40),
                PHASE_NAMES[1].to_string_lossy()
            ),
            format!("rec {:?} 31 1200", addr(0x70)),
            format!("stop {:?}", addr(0x70)),
        ]
    );
}

#[test]
fn v6_adapter_drops_phases_state_31_and_the_kernel_phase_bit() {
    let p = v6_plugin();
    assert!(!p.passes_type(ty::KERNEL_PHASE));
    let mut ctx = ptr::null_mut();
    let mut mask: c_int = 0;
    // SAFETY: valid out-pointers.
    unsafe { p.init(&mut ctx, 1, &mut mask, ptr::null(), 1, 2, 0, None) };
    assert_eq!(mask as u64, ty::COLL, "v6 never gets KernelPhase work");
    let mut h = addr(0xdead);
    // SAFETY: the member is initialised.
    unsafe { p.start7(ctx, &mut h, &nccl::kernel_phase(0x40, 0, 0, 5)) };
    assert!(h.is_null(), "not passed: NULL handle");
    // A symmetric, tagged Coll: the v6 descriptor has no trace of the v7 fields.
    let d = nccl::coll(
        0x20,
        1,
        3,
        c"AllGather",
        8,
        4,
        0x30,
        0x7f00,
        0x7a90_0002,
        true,
    );
    // SAFETY: as above.
    unsafe { p.start7(ctx, &mut h, &d) };
    assert_eq!(h, addr(0x60));
    // SAFETY: NULL args for 23 (a v6 plugin gets the adapter's zeroed args); 31 dropped.
    unsafe {
        p.record(h, state::GROUP_START_API_STOP, ptr::null());
        p.record(h, state::KERNEL_PHASE_STOP, &timer(9));
        p.record(h, state::KERNEL_CH_STOP, &timer(7));
    }
    assert_eq!(
        seen(),
        [
            format!("start6 ty={:#x} padding_zero=true", ty::COLL),
            format!("rec {:?} 23 0", addr(0x60)),
            format!("rec {:?} {} 7", addr(0x60), state::KERNEL_CH_STOP),
        ]
    );
    // The v6 Coll is NCCL's field copy.
    let mut v6 = DescrV6::zeroed();
    // SAFETY: the Coll member is initialised.
    assert!(unsafe { descr_to_v6(&d, &mut v6) });
    // SAFETY: written by `descr_to_v6`.
    let c = unsafe { v6.u.coll };
    assert_eq!((c.seq_number, c.count, c.n_channels), (3, 8, 4));
    assert_eq!(
        (cstr(c.algo), cstr(c.proto)),
        ("R".to_string(), String::new())
    );
    assert_eq!(c.parent_group, addr(0x30));
}

#[test]
fn v6_descriptors_reach_a_v7_table_with_the_v7_fields_unset() {
    let p = v7_plugin();
    let mut h = ptr::null_mut();
    // SAFETY: the Coll member is initialised with static strings.
    unsafe { p.start(addr(1), &mut h, &coll_v6()) };
    // SAFETY: GroupApi reads no member.
    unsafe { p.start(addr(1), &mut h, &of_type(ty::GROUP_API)) };
    assert_eq!(
        seen(),
        [
            "start Coll seq=7 tag=0x0 sym=false variant=NULL algo=RING proto=\"LL128\"".to_string(),
            format!("start type {:#x}", ty::GROUP_API),
        ]
    );
}

#[test]
fn the_newest_symbol_is_v7() {
    assert_eq!(SYMBOLS[NEWEST as usize - 1], c"ncclProfiler_v7");
    let err = Plugin::open(Path::new("libm.so.6"), None).unwrap_err();
    assert!(err.contains("ncclProfiler_v7"), "{err}");
}
