//! Wire formats. Decoders borrow from the input (zero-copy) and return typed
//! errors naming the field and the rule; encoders append to a caller's buffer.

pub mod cm;
pub mod hipobj;
pub mod roce;
pub mod surf;
