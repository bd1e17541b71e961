//! Names a program may import that this device does not support, each
//! failing as rdma-core documents it for a device without the feature
//! (NULL with errno EOPNOTSUPP, or the errno returned), so that a program
//! built against the full library loads and takes its fallback. Also the
//! rate helpers, which are pure tables, and the private node.
//!
//! The private node `IBVERBS_PRIVATE_34` is rdma-core 44's provider ABI.
//! Debian's perftest links Debian's libmlx5 and libefa directly, and those
//! import it: without the node they do not load, and neither does perftest.
//! Its names are exported here as inert stubs (they never reach a device:
//! the providers' own `ibv_device`s never exist here, and a provider that
//! asks whether one of ours is its own reads NULL, see `device.rs`), so the
//! distribution's own provider libraries load unchanged beside this one.
//! `ibv_query_gid_type`, which `ibv_devinfo` calls, is real (`verbs/context.rs`).

use std::ffi::{c_int, c_void};
use std::ptr::null_mut;

use crate::abi::set_errno;

/// Entries that return `errno` as their result.
macro_rules! returns {
    ($ver:literal, $errno:expr => $($name:ident),* $(,)?) => {
        $( export!($ver, $errno, fn $name() -> c_int { $errno }); )*
    };
}

/// Entries that return NULL and set errno.
macro_rules! null {
    ($ver:literal, $errno:expr => $($name:ident),* $(,)?) => {
        $( export!($ver, null_mut(), fn $name() -> *mut c_void { set_errno($errno); null_mut() }); )*
    };
}

/// Entries that return -1 and set errno.
macro_rules! minus_one {
    ($ver:literal, $errno:expr => $($name:ident),* $(,)?) => {
        $( export!($ver, -1, fn $name() -> c_int { set_errno($errno); -1 }); )*
    };
}

/// Entries with nothing to return or undo.
macro_rules! inert {
    ($ver:literal => $($name:ident),* $(,)?) => {
        $( export!($ver, (), fn $name() {}); )*
    };
}

const NO: c_int = libc::EOPNOTSUPP;

// Address handles, multicast and path records belong to UD and IB
// subnets; this device is RC over RoCEv2.
null!("IBVERBS_1.1", NO => ibv_create_ah, ibv_create_ah_from_wc);
returns!("IBVERBS_1.1", libc::EINVAL => ibv_destroy_ah);
returns!("IBVERBS_1.1", NO => ibv_attach_mcast, ibv_detach_mcast, ibv_rereg_mr);
minus_one!("IBVERBS_1.1", NO => ibv_init_ah_from_wc, ibv_resolve_eth_l2_from_gid);
inert!("IBVERBS_1.1" => ibv_register_driver, ibv_copy_ah_attr_from_kern);
inert!("IBVERBS_1.0" => ibv_copy_path_rec_from_kern, ibv_copy_path_rec_to_kern, ibv_copy_qp_attr_from_kern);

// Importing objects of another process's context, ECE, dma-buf, DMA
// handles, device memory, completion counters: no such features.
null!("IBVERBS_1.10", NO => ibv_import_device, ibv_import_mr, ibv_import_pd);
returns!("IBVERBS_1.10", NO => ibv_query_ece, ibv_set_ece);
inert!("IBVERBS_1.10" => ibv_unimport_mr, ibv_unimport_pd);
null!("IBVERBS_1.12", NO => ibv_reg_dmabuf_mr);
null!("IBVERBS_1.13", NO => ibv_import_dm);
inert!("IBVERBS_1.13" => ibv_unimport_dm);
null!("IBVERBS_1.15", NO => ibv_alloc_dmah, ibv_reg_mr_ex);
returns!("IBVERBS_1.15", NO => ibv_dealloc_dmah);
minus_one!("IBVERBS_1.16", NO => ibv_dm_export_dmabuf_fd);
returns!("IBVERBS_1.16", NO => ibv_query_port_speed);
null!("IBVERBS_1.17", NO => ibv_alloc_buf, ibv_reg_buf_mr);
inert!("IBVERBS_1.17" => ibv_free_buf);
null!("IBVERBS_1.18", NO => ibv_create_comp_cntr);
minus_one!("IBVERBS_1.18", NO => ibv_export_buf_dmabuf_fd);
returns!("IBVERBS_1.18", NO => _ibv_query_comp_cntr_caps, ibv_destroy_comp_cntr, ibv_inc_comp_cntr,
    ibv_inc_err_comp_cntr, ibv_qp_attach_comp_cntr, ibv_read_comp_cntr, ibv_read_err_comp_cntr,
    ibv_set_comp_cntr, ibv_set_err_comp_cntr);

export!(
    "IBVERBS_1.14",
    0,
    fn ibv_query_qp_data_in_order() -> c_int {
        // 0: no promise beyond RC's own ordering (data lands in PSN order).
        0
    }
);

// ---- rates (IBA's static rate codes), pure tables ----

/// (code, multiple of 2.5 Gb/s, Mb/s) for each `enum ibv_rate`.
const RATES: [(c_int, c_int, c_int); 22] = [
    (2, 1, 2500),
    (5, 2, 5000),
    (3, 4, 10000),
    (6, 8, 20000),
    (4, 12, 30000),
    (7, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, 6, 14062),
    (12, 22, 56250),
    (13, 45, 112500),
    (14, 67, 168750),
    (15, 10, 25781),
    (16, 40, 103125),
    (17, 80, 206250),
    (18, 120, 309375),
    (19, 20, 50000),
    (20, 160, 400000),
    (21, 240, 600000),
    (22, 320, 800000),
    (23, 480, 1200000),
];

export!(
    "IBVERBS_1.0",
    0,
    fn ibv_rate_to_mult(rate: c_int) -> c_int {
        RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.1)
    }
);

export!(
    "IBVERBS_1.0",
    0,
    fn mult_to_ibv_rate(mult: c_int) -> c_int {
        RATES.iter().find(|r| r.1 == mult).map_or(0, |r| r.0)
    }
);

export!(
    "IBVERBS_1.1",
    0,
    fn ibv_rate_to_mbps(rate: c_int) -> c_int {
        RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
    }
);

export!(
    "IBVERBS_1.1",
    0,
    fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
        RATES.iter().find(|r| r.2 == mbps).map_or(0, |r| r.0)
    }
);

// ---- IBVERBS_PRIVATE_34: what Debian's providers import, inert ----

returns!("IBVERBS_PRIVATE_34", NO => execute_ioctl, ibv_cmd_advise_mr, ibv_cmd_alloc_dm, ibv_cmd_alloc_mw,
    ibv_cmd_alloc_pd, ibv_cmd_attach_mcast, ibv_cmd_close_xrcd, ibv_cmd_create_ah, ibv_cmd_create_counters,
    ibv_cmd_create_cq, ibv_cmd_create_cq_ex, ibv_cmd_create_flow, ibv_cmd_create_flow_action_esp,
    ibv_cmd_create_qp_ex, ibv_cmd_create_qp_ex2, ibv_cmd_create_rwq_ind_table, ibv_cmd_create_srq,
    ibv_cmd_create_srq_ex, ibv_cmd_create_wq, ibv_cmd_dealloc_mw, ibv_cmd_dealloc_pd, ibv_cmd_dereg_mr,
    ibv_cmd_destroy_ah, ibv_cmd_destroy_counters, ibv_cmd_destroy_cq, ibv_cmd_destroy_flow,
    ibv_cmd_destroy_flow_action, ibv_cmd_destroy_qp, ibv_cmd_destroy_rwq_ind_table, ibv_cmd_destroy_srq,
    ibv_cmd_destroy_wq, ibv_cmd_detach_mcast, ibv_cmd_free_dm, ibv_cmd_get_context, ibv_cmd_modify_cq,
    ibv_cmd_modify_flow_action_esp, ibv_cmd_modify_qp, ibv_cmd_modify_qp_ex, ibv_cmd_modify_srq,
    ibv_cmd_modify_wq, ibv_cmd_open_qp, ibv_cmd_open_xrcd, ibv_cmd_query_context, ibv_cmd_query_device_any,
    ibv_cmd_query_mr, ibv_cmd_query_port, ibv_cmd_query_qp, ibv_cmd_query_srq, ibv_cmd_read_counters,
    ibv_cmd_reg_dm_mr, ibv_cmd_reg_dmabuf_mr, ibv_cmd_reg_mr, ibv_cmd_rereg_mr, ibv_cmd_resize_cq);
null!("IBVERBS_PRIVATE_34", NO => _verbs_init_and_alloc_context, verbs_open_device);
inert!("IBVERBS_PRIVATE_34" => verbs_register_driver_34, verbs_set_ops, verbs_uninit_context, verbs_init_cq, __verbs_log);
returns!("IBVERBS_PRIVATE_34", 0 => verbs_allow_disassociate_destroy);
