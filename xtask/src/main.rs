//! Project chores: `cargo xtask ci`, `cargo xtask sim`, `cargo xtask bench`.
fn main() {}
