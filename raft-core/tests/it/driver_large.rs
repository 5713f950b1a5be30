//! A pipeline larger than one frame through a follower (W4): the batch goes to the leader in
//! parts that each fit a frame, in order, and every write commits, as it does on the leader.
//! Before, the one `Forward` frame was refused before it was sent and every write of the
//! batch was reported unknown, every time.

use bytes::Bytes;
use raft_core::driver::WriteSession;
use raft_core::mem::transport::MemNetwork;

use crate::driver::{start_cluster, wait_for_leader, Bounded};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_larger_than_a_frame_commits_through_a_follower_in_order() {
    let net = MemNetwork::new();
    let nodes = start_cluster(&net, 3).await;
    let leader = wait_for_leader(&nodes, None).await;
    let follower = &nodes[(leader + 1) % 3];
    // 40 payloads of 500 KiB: 20 MB, over the 16 MiB frame limit and five parts.
    let payloads: Vec<Bytes> = (0..40u8).map(|i| Bytes::from(vec![i; 500 << 10])).collect();
    let total: usize = payloads.iter().map(Bytes::len).sum();
    assert!(total > 16 << 20, "over the default frame limit");
    let mut session = WriteSession::new();
    let results = session
        .write_batch(&follower.node, payloads.clone())
        .bounded()
        .await;
    let offsets: Vec<u64> = results
        .iter()
        .map(|r| r.as_ref().expect("committed").id.offset.0)
        .collect();
    assert!(
        offsets.windows(2).all(|w| w[0] < w[1]),
        "applied in the order sent: {offsets:?}"
    );
    // The same through a plain batch, without a session.
    let results = follower.node.write_batch(payloads).bounded().await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}
