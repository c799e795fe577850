//! Profiler ABI v7 through the release plugin's C ABI: the `ncclProfiler_v7`
//! table, a tagged CollApi → Coll → KernelCh → KernelPhase tree in NCCL's
//! order (each phase: start, record state 31 with its GPU end, stop, all
//! before the KernelCh's stop), and what the trace keeps of it.

mod common;
use common::*;
use evring_shim::abi::*;
use serde_json::Value;
use std::ffi::{c_int, c_void};

/// The plugin's v7 table.
fn table(i: &Inst) -> &'static ProfilerV7 {
    let p =
        i.p.symbol(c"ncclProfiler_v7")
            .expect("ncclProfiler_v7 exported");
    // SAFETY: the exported symbol is a `ProfilerV7` static of the loaded
    // library, which is never unloaded (`-z nodelete`).
    unsafe { &*(p as *const ProfilerV7) }
}

fn descr(t: u64, parent: u64) -> DescrV7 {
    let mut d = DescrV7::zeroed();
    d.ty = t;
    d.parent_obj = parent as *mut c_void;
    d
}

fn start(t: &ProfilerV7, ctx: u64, d: &mut DescrV7) -> u64 {
    let mut h: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid out-pointer and a descriptor on our stack.
    assert_eq!(unsafe { (t.start_event)(ctx as *mut c_void, &mut h, d) }, 0);
    assert!(!h.is_null(), "type {:#x} was dropped", d.ty);
    h as u64
}

fn record(t: &ProfilerV7, h: u64, st: c_int, p_timer: u64) {
    let mut a = StateArgsV7 {
        kernel_ch: KernelChArgs { p_timer },
    };
    // SAFETY: a handle the plugin gave, args on our stack.
    let rc = unsafe { (t.record_event_state)(h as *mut c_void, st, &mut a) };
    assert_eq!(rc, 0);
}

fn stop(t: &ProfilerV7, h: u64) {
    // SAFETY: a handle the plugin gave.
    assert_eq!(unsafe { (t.stop_event)(h as *mut c_void) }, 0);
}

fn hex(v: &Value) -> u64 {
    u64::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

#[test]
fn v7_tree_with_kernel_phases_and_user_tags() {
    // The first communicator (through the default table) builds the engine
    // with this mask: KernelPhase and Coll/CollApi, KernelCh left out.
    let mask_env = (ty::COLL_API | ty::COLL | ty::KERNEL_PHASE).to_string();
    let (i, first) = Inst::new(
        "v7",
        None,
        &[("NCCL_PROFILE_EVENT_MASK", mask_env.as_str())],
        &[(1, 0)],
    );
    let t = table(&i);
    // SAFETY: reads the table's name, a static C string.
    let name = unsafe { std::ffi::CStr::from_ptr(t.name) };
    assert_eq!(name.to_str().unwrap(), "evring");
    // NCCL's mask is a process-wide int: leaked, as the plugin reads it
    // until the process ends (footers, metrics).
    let mask: &'static mut c_int = Box::leak(Box::new(0));
    let mut ctx: *mut c_void = std::ptr::null_mut();
    // SAFETY: out-pointers valid for the call, a static name.
    let rc = unsafe {
        (t.init)(
            &mut ctx,
            0x7777,
            &mut *mask,
            c"v7-comm".as_ptr(),
            1,
            2,
            0,
            None,
        )
    };
    assert_eq!(rc, 0);
    assert!(!ctx.is_null());
    let ctx = ctx as u64;
    // KernelPhase brings KernelCh with it, in the mask written back.
    let want = ty::COLL_API | ty::COLL | ty::KERNEL_PHASE | ty::KERNEL_CH;
    assert_eq!(*mask as u64, want);
    let mask_ptr: *mut c_int = mask;

    let tag = 0x5EED_0000_0000_0007u64;
    let mut api = descr(ty::COLL_API, 0);
    api.u.coll_api = CollApiV7 {
        func: F_ALLREDUCE,
        count: 1 << 20,
        datatype: DT_F32,
        root: 0,
        stream: 0x1234 as *mut c_void,
        graph_captured: false,
        user_tag: tag,
    };
    let a = start(t, ctx, &mut api);
    let mut coll = descr(ty::COLL, a);
    coll.u.coll = CollV7 {
        seq_number: 1,
        func: F_ALLREDUCE,
        send_buff: std::ptr::null(),
        recv_buff: std::ptr::null_mut(),
        count: 1 << 20,
        root: 0,
        datatype: DT_F32,
        n_channels: 1,
        n_warps: 16,
        algo: c"AllReduce_ST_LL".as_ptr(),
        proto: c"".as_ptr(),
        parent_group: std::ptr::null_mut(),
        kernel_variant: c"AllReduce_ST_LL".as_ptr(),
        is_sym_coll: true,
        user_tag: tag,
    };
    coll.rank = 0;
    let c = start(t, ctx, &mut coll);
    let g = 7_000_000_000u64;
    let mut kch = descr(ty::KERNEL_CH, c);
    kch.u.kernel_ch = KernelChV4 {
        channel_id: 0,
        p_timer: g,
    };
    let k = start(t, ctx, &mut kch);
    let names = [c"initial_sync", c"compute", c"final_sync"];
    let mut phases = Vec::new();
    for (p, n) in names.iter().enumerate() {
        let mut d = descr(ty::KERNEL_PHASE, k);
        d.u.kernel_phase = KernelPhaseV7 {
            channel_id: 0,
            phase_id: p as u8,
            phase_name: n.as_ptr(),
            p_timer: g + 100 * p as u64,
        };
        let h = start(t, ctx, &mut d);
        record(t, h, state::KERNEL_PHASE_STOP, g + 100 * p as u64 + 90);
        stop(t, h);
        phases.push(h);
    }
    record(t, k, state::KERNEL_CH_STOP, g + 300);
    stop(t, k);
    stop(t, c);
    stop(t, a);
    // NCCL (or the application) changes the mask out of band: the footer
    // reports the one in force, beside the one evring asked for.
    // SAFETY: the leaked int above; no other thread writes it now.
    unsafe { *mask_ptr = (want | ty::P2P) as c_int };
    // SAFETY: the context init gave.
    assert_eq!(unsafe { (t.finalize)(ctx as *mut c_void) }, 0);
    i.fin(first[0]);
    assert_balanced(&i.stats());

    let evs = i.begins();
    let find = |cat: &str| -> Vec<&Value> { evs.iter().filter(|e| e["cat"] == cat).collect() };
    let colls = find("Coll");
    assert_eq!(colls.len(), 1);
    let ca = &colls[0]["args"];
    assert_eq!(ca["user_tag"], tag.to_string(), "{ca}");
    assert_eq!(ca["kernel_variant"], "AllReduce_ST_LL");
    assert_eq!(ca["sym_coll"], true);
    assert_eq!(ca["proto"], "");
    assert_eq!(find("CollApi")[0]["args"]["user_tag"], tag.to_string());
    let kernel = find("KernelCh");
    assert_eq!(kernel.len(), 1);
    assert_eq!(hex(&kernel[0]["args"]["id"]), k);
    let got = find("KernelPhase");
    assert_eq!(got.len(), 3, "{got:?}");
    for (p, e) in got.iter().enumerate() {
        let a = &e["args"];
        let want = ["initial_sync", "compute", "final_sync"][p];
        let mine = got
            .iter()
            .find(|e| e["args"]["phase"] == want)
            .unwrap_or_else(|| panic!("no {want} phase"));
        let ma = &mine["args"];
        assert_eq!(hex(&ma["parent"]), k, "a phase's parent is its KernelCh");
        assert_eq!(ma["channel"], 0);
        assert_eq!(ma["gpu_start"], g + 100 * p as u64, "{ma}");
        assert_eq!(ma["gpu_end"], g + 100 * p as u64 + 90, "{ma}");
        assert_eq!(ma["timing"], "gpu");
        assert!(phases.contains(&hex(&a["id"])));
    }
    let footer = i
        .traces()
        .into_iter()
        .flat_map(|(_, evs)| evs)
        .find(|e| e["name"] == "evring.summary" && e["args"]["mask"].is_number())
        .expect("a footer with the mask in force");
    assert_eq!(footer["args"]["mask"], want | ty::P2P, "{footer}");
    assert_eq!(footer["args"]["mask_requested"], want, "{footer}");
    // Each phase lies inside its channel's GPU window, on its own track.
    assert!(got.iter().all(|e| e["tid"] != kernel[0]["tid"]));
}
