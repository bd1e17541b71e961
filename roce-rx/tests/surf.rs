//! The surf metadata bus, bit for bit as docs/protocols.md §1.10 lays it out.

use proptest::prelude::*;
use rctb_roce_rx::surf::*;

fn bit(regs: &[u32], b: u32) -> u32 {
    (regs[(b / 32) as usize] >> (b % 32)) & 1
}

fn bits(regs: &[u32], hi: u32, lo: u32) -> u64 {
    (lo..=hi).rev().fold(0, |acc, b| (acc << 1) | bit(regs, b) as u64)
}

#[test]
fn words_span_the_documented_registers() {
    assert_eq!((TX_REGS, RX_REGS), (10, 9));
    assert_eq!(REG_TX + 4 * TX_REGS as u32, REG_RX, "MetaDataRx follows MetaDataTx");
    assert!(REG_RX + 4 * RX_REGS as u32 <= REG_SOFT_RESET);
}

#[test]
fn pd_layout() {
    let regs = Tx::Pd(PdTx { alloc: true, key: 0xAABB_CCDD, handler: 0x1122_3344 }).encode().unwrap();
    assert_eq!(regs[0], 0x1122_3344, "handler at bits 31:0");
    assert_eq!(regs[1], 0xAABB_CCDD, "key at bits 63:32");
    assert_eq!(bit(&regs, 64), 1, "alloc at bit 64");
    assert_eq!(bits(&regs, 302, 301), 0, "bus type PD");
    assert_eq!(bits(&regs, 300, 65), 0);
}

#[test]
fn mr_layout() {
    let mr = MrTx {
        alloc: true,
        laddr: 0x0000_7f12_3456_7000,
        len: 0x0010_0000,
        access: 0x0F,
        pd_handler: 0xDEAD_BEEF,
        lkey_part: 0x1234_5678,
        rkey_part: 0x7654_3210,
        lkey_or_not: true,
        lkey: 0xCAFE_F00D,
        rkey: 0x0BAD_F00D,
    };
    let regs = Tx::Mr(mr).encode().unwrap();
    assert_eq!(bits(&regs, 31, 0), 0x0BAD_F00D, "rkey");
    assert_eq!(bits(&regs, 63, 32), 0xCAFE_F00D, "lkey");
    assert_eq!(bit(&regs, 64), 1, "lkey-or-not");
    assert_eq!(bits(&regs, 95, 65), 0x7654_3210, "rkey part (31 bits)");
    assert_eq!(bits(&regs, 126, 96), 0x1234_5678, "lkey part (31 bits)");
    assert_eq!(bits(&regs, 158, 127), 0xDEAD_BEEF, "pd handler");
    assert_eq!(bits(&regs, 166, 159), 0x0F, "access");
    assert_eq!(bits(&regs, 198, 167), 0x0010_0000, "len");
    assert_eq!(bits(&regs, 262, 199), 0x0000_7f12_3456_7000, "laddr");
    assert_eq!(bit(&regs, 263), 1, "alloc");
    assert_eq!(bits(&regs, 302, 301), 1, "bus type MR");
    assert_eq!(Tx::decode(&regs).unwrap(), Tx::Mr(mr));
}

#[test]
fn qp_layout_puts_every_field_where_the_rx_word_expects_the_state() {
    let mut qp = QpTx::rc(QpRequest::Modify, 0x0A0B_0C0D, 0x00AB_CDEF);
    qp.attr_mask = 0x129300;
    qp.state = 3; // RTR
    qp.pmtu = 3;
    qp.rq_psn = 0x12_3456;
    qp.dest_qpn = 0x00_0011;
    qp.min_rnr_timer = 12;
    qp.retry_cnt = 3;
    qp.rnr_retry = 7;
    let regs = Tx::Qp(qp).encode().unwrap();
    assert_eq!(bit(&regs, 0), 0, "sq_sig_all");
    assert_eq!(bits(&regs, 4, 1), 2, "QP type RC");
    assert_eq!(bits(&regs, 7, 5), 7, "rnr retry");
    assert_eq!(bits(&regs, 10, 8), 3, "retry count");
    assert_eq!(bits(&regs, 15, 11), 14, "timeout");
    assert_eq!(bits(&regs, 20, 16), 12, "min rnr timer");
    assert_eq!(bits(&regs, 28, 21), 16, "max dest rd atomic");
    assert_eq!(bits(&regs, 36, 29), 16, "max rd atomic");
    assert_eq!(bit(&regs, 37), 0, "sq draining");
    assert_eq!(bits(&regs, 53, 38), 0xFFFF, "pkey");
    assert_eq!(bits(&regs, 93, 54), 0x20_2001_0100, "cap");
    assert_eq!(bits(&regs, 101, 94), 0x0E, "access");
    assert_eq!(bits(&regs, 125, 102), 0x11, "dest qpn");
    assert_eq!(bits(&regs, 149, 126), 0, "sq psn");
    assert_eq!(bits(&regs, 173, 150), 0x12_3456, "rq psn");
    assert_eq!(bits(&regs, 205, 174), 0, "qkey");
    assert_eq!(bits(&regs, 208, 206), 3, "pmtu");
    assert_eq!(bits(&regs, 212, 209), 0, "current state");
    assert_eq!(bits(&regs, 216, 213), 3, "state: the RX word reads it at the same bits 216:213");
    assert_eq!(bits(&regs, 242, 217), 0x129300, "attr mask");
    assert_eq!(bits(&regs, 266, 243), 0xAB_CDEF, "qpn");
    assert_eq!(bits(&regs, 298, 267), 0x0A0B_0C0D, "pd handler");
    assert_eq!(bits(&regs, 300, 299), 2, "request MODIFY");
    assert_eq!(bits(&regs, 302, 301), 2, "bus type QP");
    assert_eq!(regs[9] >> 15, 0, "nothing above bit 302");
}

#[test]
fn rx_fields_sit_where_the_engine_puts_them() {
    let pd = Rx::Pd { success: true, handler: 0x5555_AAAA }.encode();
    assert_eq!((bit(&pd, 64), bits(&pd, 63, 32), bits(&pd, 275, 274)), (1, 0x5555_AAAA, 0));
    let mr = Rx::Mr { success: true, lkey: 0x1111_2222, rkey: 0x3333_4444 }.encode();
    assert_eq!(
        (bit(&mr, 262), bits(&mr, 63, 32), bits(&mr, 31, 0), bits(&mr, 275, 274)),
        (1, 0x1111_2222, 0x3333_4444, 1)
    );
    let qp = Rx::Qp { success: true, qpn: 0x00_0123, state: 4 }.encode();
    assert_eq!((bit(&qp, 273), bits(&qp, 272, 249), bits(&qp, 216, 213), bits(&qp, 275, 274)), (1, 0x123, 4, 2));
    for rx in [
        Rx::Pd { success: false, handler: 7 },
        Rx::Mr { success: true, lkey: 1, rkey: 2 },
        Rx::Qp { success: true, qpn: 5, state: 3 },
    ] {
        assert_eq!(Rx::decode(&rx.encode()), Ok(rx));
    }
}

#[test]
fn bad_input_names_the_field_and_the_rule() {
    let mut qp = QpTx::rc(QpRequest::Create, 1, 0x100_0000);
    assert_eq!(Tx::Qp(qp).encode(), Err(FieldTooWide { field: "qpn", value: 0x100_0000, bits: 24 }));
    qp.qpn = 1;
    qp.timeout = 32;
    assert_eq!(Tx::Qp(qp).encode().unwrap_err().to_string(), "timeout = 0x20: must fit 5 bits");
    let mut regs = [0u32; RX_REGS];
    regs[RX_REGS - 1] = 3 << (RX_BITS % 32 - 2);
    assert_eq!(Rx::decode(&regs), Err(RxError::BusType(3)));
    regs[RX_REGS - 1] = 1 << 31;
    assert!(matches!(Rx::decode(&regs), Err(RxError::StrayBits { .. })));
}

fn qp() -> impl Strategy<Value = QpTx> {
    (
        any::<u32>(),
        0u32..1 << 24,
        0u32..1 << 26,
        0u8..16,
        0u8..8,
        0u32..1 << 24,
        0u32..1 << 24,
        0u8..32,
        0u8..32,
        0u8..8,
    )
        .prop_map(|(pd, qpn, mask, state, pmtu, rq, sq, rnr, timeout, retry)| {
            let mut q = QpTx::rc(QpRequest::Modify, pd, qpn);
            (q.attr_mask, q.state, q.pmtu, q.rq_psn, q.sq_psn) = (mask, state, pmtu, rq, sq);
            (q.min_rnr_timer, q.timeout, q.retry_cnt, q.rnr_retry) = (rnr, timeout, retry, 7 - retry);
            q
        })
}

proptest! {
    #[test]
    fn tx_words_round_trip(
        pd in (any::<bool>(), any::<u32>(), any::<u32>()),
        mr in (any::<u64>(), any::<u32>(), 0u32..1 << 31, 0u32..1 << 31, any::<u32>(), any::<u32>()),
        q in qp(),
    ) {
        let pd = Tx::Pd(PdTx { alloc: pd.0, key: pd.1, handler: pd.2 });
        let mr = Tx::Mr(MrTx { alloc: true, laddr: mr.0, len: mr.1, access: 0x0F, pd_handler: mr.4,
            lkey_part: mr.2, rkey_part: mr.3, lkey_or_not: false, lkey: mr.5, rkey: mr.1 });
        for tx in [pd, mr, Tx::Qp(q)] {
            let regs = tx.encode().unwrap();
            prop_assert_eq!(Tx::decode(&regs).unwrap(), tx);
            prop_assert_eq!(regs[TX_REGS - 1] >> (TX_BITS % 32), 0);
        }
    }

    #[test]
    fn any_rx_word_decodes_or_is_refused_without_panic(regs in prop::array::uniform9(any::<u32>())) {
        if let Ok(rx) = Rx::decode(&regs) {
            // The decoded fields encode back to a word with the same fields.
            prop_assert_eq!(Rx::decode(&rx.encode()).unwrap(), rx);
        }
    }
}
