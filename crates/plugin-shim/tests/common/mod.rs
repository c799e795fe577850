//! What the in-process writer tests share: issuing collectives through the
//! plugin's v6 table.

use evring_shim::abi::{ty, CollV5, DescrV6};
use evring_shim::exports::ncclProfiler_v6 as PLUGIN;
use std::ffi::c_void;

/// Initialises communicator 42 (`name`, rank `rank` of `nranks`) through the
/// v6 table, as NCCL would; returns its context.
pub fn init_comm(name: &std::ffi::CStr, nranks: i32, rank: i32) -> *mut c_void {
    let mut mask = 0;
    let mut ctx: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid out-pointers and a static name, as NCCL passes them.
    let rc = unsafe {
        (PLUGIN.init)(
            &mut ctx,
            42,
            &mut mask,
            name.as_ptr(),
            1,
            nranks,
            rank,
            None,
        )
    };
    assert_eq!(rc, 0);
    ctx
}

/// Starts and stops `n` AllReduce Coll events (seq 0..n) on `ctx`.
pub fn issue_allreduces(ctx: *mut c_void, n: u64) {
    for seq in 0..n {
        // SAFETY: an all-zero descriptor is valid plain data.
        let mut d: DescrV6 = unsafe { std::mem::zeroed() };
        d.ty = ty::COLL;
        d.u.coll = CollV5 {
            seq_number: seq,
            func: c"AllReduce".as_ptr(),
            send_buff: std::ptr::null(),
            recv_buff: std::ptr::null_mut(),
            count: 1024,
            root: 0,
            datatype: c"ncclFloat32".as_ptr(),
            n_channels: 1,
            n_warps: 8,
            algo: c"RING".as_ptr(),
            proto: c"SIMPLE".as_ptr(),
            parent_group: std::ptr::null_mut(),
        };
        let mut h: *mut c_void = std::ptr::null_mut();
        // SAFETY: our context, a valid handle slot and descriptor.
        unsafe {
            assert_eq!((PLUGIN.start_event)(ctx, &mut h, &mut d), 0);
            assert_eq!((PLUGIN.stop_event)(h), 0);
        }
    }
}
