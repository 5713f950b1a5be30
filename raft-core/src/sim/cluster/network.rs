//! The simulated network: directed links that block or hold messages, and the delivery of
//! every message with the run's delays, drops and duplicates.

use super::*;

impl Cluster {
    /// Cuts the link from `from` to `to` (one way).
    pub fn block(&mut self, from: u32, to: u32) {
        self.blocked.insert((ReplicaId(from), ReplicaId(to)));
    }

    /// Cuts both directions between `a` and `b`.
    pub fn cut(&mut self, a: u32, b: u32) {
        self.block(a, b);
        self.block(b, a);
    }

    /// Cuts `id` off from every other replica.
    pub fn isolate(&mut self, id: u32) {
        for h in 0..self.hosts.len() as u32 {
            if h + 1 != id {
                self.cut(id, h + 1);
            }
        }
    }

    /// Holds every message from `from` to `to` in the network, undelivered, until
    /// [`Cluster::release`]: a message that left long before it arrives.
    pub fn hold(&mut self, from: u32, to: u32) {
        self.held_links.insert((ReplicaId(from), ReplicaId(to)));
    }

    /// Delivers every message held on the link from `from` to `to` (after the usual delay) and
    /// stops holding it. Returns how many were held.
    pub fn release(&mut self, from: u32, to: u32) -> usize {
        let link = (ReplicaId(from), ReplicaId(to));
        self.held_links.remove(&link);
        let (due, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held_messages)
            .into_iter()
            .partition(|(f, t, _, _)| (*f, *t) == link);
        self.held_messages = keep;
        let count = due.len();
        for (from, to, incarnation, wire) in due {
            self.net_send(from, to, incarnation, wire);
        }
        count
    }

    pub(super) fn send(&mut self, i: usize, msg: Outgoing) {
        let h = &self.hosts[i];
        let (from, incarnation) = (h.id, h.incarnation);
        let durable = h.election.unwrap_or_default();
        self.checker.on_send(self.now, from, durable, &msg);
        match msg {
            Outgoing::Request { to, id, request } => {
                if matches!(request, Request::ReadIndex(_)) {
                    self.hosts[i].read_index_sent += 1;
                }
                self.hosts[i].outstanding.insert(id, to);
                let timeout = self.hosts[i].cfg.request_timeout;
                self.schedule(
                    self.now + timeout,
                    Ev::Timeout {
                        host: from,
                        incarnation,
                        id,
                    },
                );
                self.net_send(from, to, incarnation, Wire::Request { id, request });
            }
            Outgoing::Response {
                id,
                mut response,
                fill,
                ..
            } => {
                let Some(inbound) = self.hosts[i].inbound.remove(&id.0) else {
                    return;
                };
                if let (Some(candidate), Response::Vote(v)) = (inbound.standard_vote, &response) {
                    if v.granted {
                        self.checker
                            .on_standard_grant(self.now, from, candidate, v.epoch, durable);
                    }
                }
                match (fill, &mut response) {
                    (Some(Fill::Records(range)), Response::Fetch(f)) => {
                        let h = &self.hosts[i];
                        if range.from < h.log_start {
                            let msg = format!("{from} asked to serve purged records {range:?}");
                            self.checker.report(self.now, msg);
                        }
                        f.records = read_range(&h.log, range);
                    }
                    (
                        Some(Fill::SnapshotChunk {
                            id,
                            position,
                            max_bytes,
                        }),
                        Response::FetchSnapshot(r),
                    ) => {
                        self.fill_chunk(i, id, position, max_bytes, r);
                    }
                    _ => {}
                }
                let wire = Wire::Response {
                    id: inbound.id,
                    response,
                };
                self.net_send(from, inbound.from, inbound.incarnation, wire);
            }
        }
    }

    pub(super) fn net_send(
        &mut self,
        from: ReplicaId,
        to: ReplicaId,
        incarnation: u32,
        wire: Wire,
    ) {
        if self.blocked.contains(&(from, to)) {
            return;
        }
        if self.held_links.contains(&(from, to)) {
            self.held_messages.push((from, to, incarnation, wire));
            return;
        }
        let f = &self.opts.faults;
        if self.faults_on && self.rng.chance(f.drop) {
            return;
        }
        let (lo, hi) = (f.delay_min.as_nanos() as u64, f.delay_max.as_nanos() as u64);
        let dup = self.faults_on && self.rng.chance(f.duplicate);
        let mut delay = Duration::from_nanos(self.rng.range(lo, hi));
        if self.faults_on && f.straggle > 0.0 && self.rng.chance(f.straggle) {
            delay += Duration::from_millis(self.rng.range(50, 250));
        }
        if dup {
            let again = Duration::from_nanos(self.rng.range(lo, hi));
            let copy = match &wire {
                Wire::Request { id, request } => Wire::Request {
                    id: *id,
                    request: request.clone(),
                },
                Wire::Response { id, response } => Wire::Response {
                    id: *id,
                    response: response.clone(),
                },
            };
            self.schedule(
                self.now + again,
                Ev::Deliver {
                    to,
                    from,
                    incarnation,
                    wire: copy,
                },
            );
        }
        self.schedule(
            self.now + delay,
            Ev::Deliver {
                to,
                from,
                incarnation,
                wire,
            },
        );
    }
}
