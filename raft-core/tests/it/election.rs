//! Elections.

use crate::*;

#[test]
fn scratch() {
    let mut c = cluster(1, 3, 0);
    c.run_for(ms(2000));
    println!("{}", c.trace());
    println!("{:?}", c.violations());
}
