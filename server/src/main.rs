//! `troupe-server`: the control-plane binary.

fn main() {}
