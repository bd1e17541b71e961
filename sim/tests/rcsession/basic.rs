//! The data phase end to end: GET and PUT of many sizes, control-plane
//! only mode, BUSY and its retry, WIRE on a dead client, expiry.

use rctb_core::rcsession::*;

use super::rig::*;

#[test]
fn get_and_put_move_the_bytes() {
    let mut r = rig_with(1, ServerConfig::default(), 1, ClientConfig { capacity: 1 << 20, ..Default::default() });
    for (i, size) in [1usize, 7, 4096, 4097, 65536, 1 << 20].into_iter().enumerate() {
        let object = pattern(i as u64, size);
        assert_eq!(r.get(0, alice(), &object, 0xC00C_0000 + i as u32).unwrap(), object, "GET of {size}");
        let object = pattern(100 + i as u64, size);
        assert_eq!(r.put(0, alice(), &object, 0xB00C_0000 + i as u32).unwrap(), object, "PUT of {size}");
    }
    r.assert_drained();
}
