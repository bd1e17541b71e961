//! The simulator's fabric counters as named values, in a fixed order, for
//! reports and for `[expect.fabric]` bounds.

use rctb_sim::FabricStats;

/// Every counter of `s` with its `FabricStats` field name.
pub fn fabric_counters(s: &FabricStats) -> Vec<(&'static str, u64)> {
    // Listed by hand (FabricStats has no serde): a counter the simulator adds
    // later shows up here once it is added to this list.
    let FabricStats {
        frames_sent,
        bytes_sent,
        delivered,
        acks,
        rnr_naks,
        seq_naks,
        other_naks,
        read_responses,
        retransmitted,
        timeouts,
        dropped_loss,
        dropped_corrupt,
        dropped_partition,
        dropped_no_route,
        dropped_no_qp,
        duplicated,
        reordered,
        ..
    } = *s;
    vec![
        ("frames_sent", frames_sent),
        ("bytes_sent", bytes_sent),
        ("delivered", delivered),
        ("acks", acks),
        ("rnr_naks", rnr_naks),
        ("seq_naks", seq_naks),
        ("other_naks", other_naks),
        ("read_responses", read_responses),
        ("retransmitted", retransmitted),
        ("timeouts", timeouts),
        ("dropped_loss", dropped_loss),
        ("dropped_corrupt", dropped_corrupt),
        ("dropped_partition", dropped_partition),
        ("dropped_no_route", dropped_no_route),
        ("dropped_no_qp", dropped_no_qp),
        ("duplicated", duplicated),
        ("reordered", reordered),
    ]
}

/// The names `fabric_counters` uses.
pub fn counter_names() -> Vec<&'static str> {
    fabric_counters(&FabricStats::default()).into_iter().map(|(n, _)| n).collect()
}
