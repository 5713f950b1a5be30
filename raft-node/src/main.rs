//! `raft-node`: a replicated key-value service speaking the Redis protocol.

fn main() {
    eprintln!("raft-node: the node binary is not assembled yet; see the README");
    std::process::exit(2);
}
