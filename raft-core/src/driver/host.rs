//! A host of many groups: one process running any number of replicated logs (groups), each a
//! KRaft replica set of its own (group id, voters, epochs, log, snapshots, state machine), over
//! one [`HostTransport`] (one connection per host pair carries every group) and one
//! [`GroupStorage`] engine (the writes of every group share its syncs).
//!
//! A replica's id is its host's id in every group, as a Kafka broker's is in every partition;
//! the voters of different groups are different subsets of the hosts. Each group runs the
//! ordinary [`Node`] on a per-group view of the host's transport ([`GroupTransport`]) and its
//! stores from the engine, so every `Node` operation works per group unchanged. The host routes
//! each inbound request to the group it names; a request for a group it does not run is turned
//! away unhandled, which its caller sees as [`crate::io::TransportError::NotSent`] (a replica
//! of a group being created elsewhere retries, as with a peer that is not up yet).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;

use super::{DriverOptions, Node, Parts, StartError};
use crate::config::ValidatedConfig;
use crate::io::{
    GroupRequestHandler, GroupStorage, HostTransport, RequestHandler, StateMachine, StorageError,
    Transport, TransportError,
};
use crate::message::{Request, Response};
use crate::types::{GroupId, ReplicaId};
use crate::voters::VoterSet;

/// Why a host operation on a group failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// The group's replica could not start.
    #[error("group {group}: {source}")]
    Start {
        /// The group.
        group: GroupId,
        /// Why.
        #[source]
        source: StartError,
    },
    /// The storage engine failed (listing, opening or dropping a group).
    #[error("group {group}: {source}")]
    Storage {
        /// The group.
        group: GroupId,
        /// Why.
        #[source]
        source: StorageError,
    },
    /// Formatting the group's storage failed (it was formatted before, or the set is empty).
    #[error("group {group}: {source}")]
    Format {
        /// The group.
        group: GroupId,
        /// Why.
        #[source]
        source: super::FormatError,
    },
    /// The group already runs on this host.
    #[error("group {0} already runs on this host")]
    Running(GroupId),
    /// The group does not run on this host.
    #[error("group {0} does not run on this host")]
    NotRunning(GroupId),
    /// The configuration names another replica than the host.
    #[error("group {group}: the configuration is replica {config}'s, but this host is {host}")]
    WrongReplica {
        /// The group.
        group: GroupId,
        /// The configuration's replica id.
        config: ReplicaId,
        /// The host's.
        host: ReplicaId,
    },
    /// The host was shut down.
    #[error("the host is shut down")]
    ShutDown,
}

/// Routes inbound requests to the groups' handlers.
#[derive(Default)]
struct Router {
    routes: RwLock<HashMap<GroupId, Arc<dyn RequestHandler>>>,
}

#[async_trait]
impl GroupRequestHandler for Router {
    async fn handle(&self, from: ReplicaId, group: GroupId, request: Request) -> Option<Response> {
        let handler = self
            .routes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&group)
            .cloned()?;
        Some(handler.handle(from, request).await)
    }
}

/// One group's view of the host's transport: what its [`Node`] is given as its
/// [`Transport`]. Serving registers the group's handler with the host's router; closing
/// removes it (the host's connections stay up for the other groups).
pub struct GroupTransport {
    group: GroupId,
    host: Arc<dyn HostTransport>,
    router: Arc<Router>,
    /// The handler this view registered, so that a close removes only its own route (a newer
    /// replica of the group may have registered since).
    served: Mutex<Option<Arc<dyn RequestHandler>>>,
}

#[async_trait]
impl Transport for GroupTransport {
    async fn serve(&self, handler: Arc<dyn RequestHandler>) -> Result<(), TransportError> {
        let mut routes = self
            .router
            .routes
            .write()
            .unwrap_or_else(|p| p.into_inner());
        routes.insert(self.group, handler.clone());
        *self.served.lock().unwrap_or_else(|p| p.into_inner()) = Some(handler);
        Ok(())
    }

    async fn call(
        &self,
        to: ReplicaId,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, TransportError> {
        self.host.call(to, self.group, request, timeout).await
    }

    async fn close(&self) {
        let Some(mine) = self.served.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return;
        };
        let mut routes = self
            .router
            .routes
            .write()
            .unwrap_or_else(|p| p.into_inner());
        if routes
            .get(&self.group)
            .is_some_and(|h| Arc::ptr_eq(h, &mine))
        {
            routes.remove(&self.group);
        }
    }

    fn voters_changed(&self, voters: &VoterSet) {
        self.host.voters_changed(self.group, voters);
    }
}

/// A process running many groups over one transport and one storage engine. Cheap to clone.
#[derive(Clone)]
pub struct Host {
    inner: Arc<HostInner>,
}

struct HostInner {
    id: ReplicaId,
    transport: Arc<dyn HostTransport>,
    storage: Arc<dyn GroupStorage>,
    router: Arc<Router>,
    nodes: Mutex<BTreeMap<GroupId, Node>>,
    shut_down: std::sync::atomic::AtomicBool,
}

/// How long [`Host::drop_group`] waits for a stopped group's storage tasks to release its
/// stores (they finish the call they are in after the replica stopped).
const RELEASE_WAIT: Duration = Duration::from_secs(10);

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("id", &self.inner.id)
            .field("groups", &self.groups())
            .finish_non_exhaustive()
    }
}

impl Host {
    /// Starts serving every group of replica `id` on `transport`, with the groups' stores in
    /// `storage`. No group runs yet: open the stored ones ([`Host::stored_groups`]) and create
    /// new ones.
    pub async fn start(
        id: ReplicaId,
        transport: Arc<dyn HostTransport>,
        storage: Arc<dyn GroupStorage>,
    ) -> Result<Host, TransportError> {
        let router = Arc::new(Router::default());
        transport.serve(router.clone()).await?;
        Ok(Host {
            inner: Arc::new(HostInner {
                id,
                transport,
                storage,
                router,
                nodes: Mutex::new(BTreeMap::new()),
                shut_down: std::sync::atomic::AtomicBool::new(false),
            }),
        })
    }

    /// The host's replica id (its id in every group).
    pub fn id(&self) -> ReplicaId {
        self.inner.id
    }

    /// The groups the storage engine holds: those to open after a restart.
    pub async fn stored_groups(&self) -> Result<Vec<GroupId>, HostError> {
        self.inner
            .storage
            .groups()
            .await
            .map_err(|source| HostError::Storage {
                group: GroupId::DEFAULT,
                source,
            })
    }

    /// The groups running on this host.
    pub fn groups(&self) -> Vec<GroupId> {
        self.nodes().keys().copied().collect()
    }

    /// The running replica of `group`.
    pub fn group(&self, group: GroupId) -> Option<Node> {
        self.nodes().get(&group).cloned()
    }

    /// Formats `group`'s storage on this host as a founding member whose first voter set is
    /// `voters` (see [`super::format`]); then [`Host::open_group`] starts it. Every founding
    /// host formats the group with the same set, once; the other replicas of the group open
    /// it unformatted and start as observers.
    pub async fn format_group(&self, group: GroupId, voters: &VoterSet) -> Result<(), HostError> {
        let storage = |source| HostError::Storage { group, source };
        let stores = self
            .inner
            .storage
            .open_group(group)
            .await
            .map_err(storage)?;
        super::format(&*stores.snapshots, voters)
            .await
            .map_err(|source| HostError::Format { group, source })
    }

    /// Starts this host's replica of `group` on its stores (created empty when the engine
    /// does not hold the group: it then starts as an observer of the configured voters, as a
    /// [`Node`] on empty storage does). `cfg` must name this host's replica id.
    pub async fn open_group(
        &self,
        group: GroupId,
        cfg: ValidatedConfig,
        state_machine: Arc<dyn StateMachine>,
        options: DriverOptions,
    ) -> Result<Node, HostError> {
        if self
            .inner
            .shut_down
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            return Err(HostError::ShutDown);
        }
        if cfg.id != self.inner.id {
            return Err(HostError::WrongReplica {
                group,
                config: cfg.id,
                host: self.inner.id,
            });
        }
        if self.nodes().contains_key(&group) {
            return Err(HostError::Running(group));
        }
        let stores = self
            .inner
            .storage
            .open_group(group)
            .await
            .map_err(|source| HostError::Storage { group, source })?;
        let transport = Arc::new(GroupTransport {
            group,
            host: self.inner.transport.clone(),
            router: self.inner.router.clone(),
            served: Mutex::new(None),
        });
        let parts = Parts {
            log: stores.log,
            election: stores.election,
            transport,
            state_machine,
            snapshots: stores.snapshots,
        };
        let mut options = options;
        if options.span.is_none() {
            // At ERROR level, so that a subscriber showing only warnings still names the group
            // on each line (a span below the filter's level is not entered at all).
            options.span = tracing::error_span!("group", id = group.0);
        }
        let node = Node::start(cfg, parts, options)
            .await
            .map_err(|source| HostError::Start { group, source })?;
        let inserted = {
            let mut nodes = self.nodes();
            let free = !nodes.contains_key(&group);
            if free {
                nodes.insert(group, node.clone());
            }
            free
        };
        if !inserted {
            // Opened twice at once: the engine refuses the second open, so this cannot be
            // reached with a well-behaved engine; stop the newcomer rather than run two.
            node.abort().await;
            return Err(HostError::Running(group));
        }
        Ok(node)
    }

    /// Stops this host's replica of `group` gracefully (a leader hands over first), keeping
    /// its storage: opening it again resumes it.
    pub async fn close_group(&self, group: GroupId) -> Result<(), HostError> {
        let running = self.nodes().remove(&group);
        let node = running.ok_or(HostError::NotRunning(group))?;
        node.shutdown().await;
        Ok(())
    }

    /// Stops this host's replica of `group` if it runs and deletes its log, election state
    /// and snapshots. Remove the replica from the group's voters first (or drop the group on
    /// every host): a voter that drops its data is a voter that lost its disk.
    pub async fn drop_group(&self, group: GroupId) -> Result<(), HostError> {
        let running = self.nodes().remove(&group);
        if let Some(node) = running {
            node.shutdown().await;
            node.stopped().await;
        }
        // The replica stopped, but its storage tasks may still be finishing the call they
        // were in; the engine refuses to drop a group whose stores are held.
        let deadline = tokio::time::Instant::now() + RELEASE_WAIT;
        loop {
            match self.inner.storage.drop_group(group).await {
                Ok(()) => {
                    // The group names no voter here any more: a transport that keeps each
                    // group's advertised endpoints forgets this one's.
                    self.inner
                        .transport
                        .voters_changed(group, &VoterSet::default());
                    return Ok(());
                }
                Err(StorageError::Invalid(_)) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(source) => return Err(HostError::Storage { group, source }),
            }
        }
    }

    /// Stops every group gracefully, then the transport.
    pub async fn shutdown(&self) {
        self.inner
            .shut_down
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let nodes: Vec<Node> = std::mem::take(&mut *self.nodes()).into_values().collect();
        // Together: each leader's handover waits up to the shutdown timeout.
        futures_util::future::join_all(nodes.iter().map(|n| n.shutdown())).await;
        self.inner.transport.close().await;
    }

    fn nodes(&self) -> std::sync::MutexGuard<'_, BTreeMap<GroupId, Node>> {
        self.inner.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }
}
