//! Membership under the driver simulator: voter changes through [`Node::change_voters`] on
//! whichever replica leads a group, and disk losses (a host comes back with empty stores for
//! every group and a new directory id), while the other faults come and go.
//!
//! What the run checks, per group: every outcome `change_voters` reported must fit one
//! history. The run
//! keeps the voter sets the cluster may be in after each change (a committed change applies to
//! each, a refused one to none, an unknown one splits each set in two); once healed, every
//! replica must act on the same set, and it must be one of those. A change reported committed
//! that no history allows, or a final set outside them, is a lie of the driver's outcome
//! contract. The clients' checks (`verify`) and the liveness checks run on top.
//!
//! The changes are made one at a time, which keeps "possible sets" a small list: one change is
//! uncommitted at most, so an unknown one is settled before the next is accepted.
//!
//! Disk loss is drawn only where the protocol must survive it: never a bootstrap (static)
//! voter, even once removed (a replica that has not fetched the removal still takes the
//! emptied machine for that voter: amnesia, which no protocol survives), and a keyed voter
//! only while every set it may be in has at least three voters and no other lost key; all of
//! this in every group the host runs, since the disk holds them all.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::driver::{Node, VoterChangeError, WriteError};
use crate::protocol::VoterChange;
use crate::sim::SimRng;
use crate::types::Role;
use crate::types::{DirectoryId, GroupId, ReplicaId};
use crate::voters::{Voter, VoterSet};

use super::kv::lock;
use super::world::{Phase, World};

/// How long one change may take before it is reported unknown.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(2);

/// Most voters the changes grow a set to.
const VOTERS_MAX: usize = 5;

/// Past this many possible sets the outcome check gives up (counted, not hidden).
const POSSIBLE_MAX: usize = 64;

/// What a change's caller was told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Told {
    Committed,
    NotApplied,
    Unknown,
}

/// The membership side of a run: per group, the changes made, their outcomes, and the sets
/// they allow.
#[derive(Default)]
pub(super) struct Membership {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    groups: std::collections::BTreeMap<GroupId, GroupState>,
    wipes: u64,
    edits: u64,
}

/// One group's changes and the sets they allow.
#[derive(Default)]
struct GroupState {
    /// The voter sets the group may be in, given every outcome so far.
    possible: Vec<VoterSet>,
    /// Set when `possible` outgrew [`POSSIBLE_MAX`]: the final set is then not checked.
    gave_up: bool,
    /// Each change and what its caller was told, for the report.
    changes: Vec<(VoterChange, Told)>,
    violations: Vec<String>,
}

/// Counts for the run's report.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct MembershipCounts {
    pub(super) committed: u64,
    pub(super) refused: u64,
    pub(super) unknown: u64,
    pub(super) wipes: u64,
    pub(super) edits: u64,
}

impl Membership {
    /// Starts following `group`, founded with `initial`.
    pub(super) fn add_group(&self, group: GroupId, initial: VoterSet) {
        let state = GroupState {
            possible: vec![initial],
            ..GroupState::default()
        };
        lock(&self.state).groups.insert(group, state);
    }

    pub(super) fn counts(&self) -> MembershipCounts {
        let s = lock(&self.state);
        let count = |t: Told| {
            let changes = s.groups.values().flat_map(|g| &g.changes);
            changes.filter(|(_, told)| *told == t).count() as u64
        };
        MembershipCounts {
            committed: count(Told::Committed),
            refused: count(Told::NotApplied),
            unknown: count(Told::Unknown),
            wipes: s.wipes,
            edits: s.edits,
        }
    }

    /// Folds one outcome of a change of `group` into its possible sets.
    fn record(&self, group: GroupId, change: VoterChange, told: Told) {
        let mut state = lock(&self.state);
        let s = state.groups.entry(group).or_default();
        s.changes.push((change.clone(), told));
        if s.gave_up || told == Told::NotApplied {
            return;
        }
        let mut next: Vec<VoterSet> = Vec::new();
        for set in &s.possible {
            if told == Told::Unknown {
                next.push(set.clone());
            }
            if let Some(changed) = apply(set, &change) {
                next.push(changed);
            }
        }
        next.sort_by_key(describe);
        next.dedup();
        if next.is_empty() {
            let note = format!(
                "membership: {group}: {change:?} was reported committed, but no history of the \
                 earlier outcomes allows it (possible sets before: {:?})",
                s.possible.iter().map(describe).collect::<Vec<_>>()
            );
            s.violations.push(note);
            s.gave_up = true;
        } else if next.len() > POSSIBLE_MAX {
            s.gave_up = true;
        } else {
            s.possible = next;
        }
    }

    /// The end of a run: in every live group, every running replica's set, which must agree
    /// and be possible.
    pub(super) async fn check_final(&self, world: &World) -> Vec<String> {
        let mut problems = Vec::new();
        for group in world.live_groups() {
            problems.extend(self.check_group(world, group).await);
        }
        problems
    }

    async fn check_group(&self, world: &World, group: GroupId) -> Vec<String> {
        let mut sets = BTreeSet::new();
        let mut ended_on = Vec::new();
        for i in 0..world.len() {
            if let Some((node, _)) = world.live(i, group) {
                if let Some(status) = node.status().await {
                    if sets.insert(describe(&status.voter_set)) {
                        ended_on.push(status.voter_set);
                    }
                }
            }
        }
        let state = lock(&self.state);
        let Some(s) = state.groups.get(&group) else {
            return Vec::new();
        };
        let mut problems = s.violations.clone();
        if sets.len() > 1 {
            problems.push(format!(
                "membership: {group}: the replicas act on different voter sets after healing: \
                 {sets:?}"
            ));
        }
        let possible: BTreeSet<String> = s.possible.iter().map(describe).collect();
        if let (Some(set), false) = (ended_on.first(), s.gave_up) {
            if !s.possible.iter().any(|p| fits(p, set)) {
                problems.push(format!(
                    "membership: {group}: the group ended with voters {set}, which no history of \
                     the reported outcomes allows (possible: {possible:?}; changes: {:?})",
                    s.changes
                ));
            }
        }
        problems
    }

    /// Whether losing host `id`'s disk (current directory `directory`) is a fault the protocol
    /// must survive: see the module comment.
    fn may_wipe(&self, world: &World, id: ReplicaId) -> bool {
        // Every group on the disk: those being founded, live or stopping (a dropped group's
        // data is gone, or goes at the host's next start).
        let groups = world.groups_in(&[Phase::Creating, Phase::Live, Phase::Stopping]);
        groups.into_iter().all(|g| self.may_wipe_in(world, g, id))
    }

    fn may_wipe_in(&self, world: &World, group: GroupId, id: ReplicaId) -> bool {
        // A replica that has not yet fetched a static voter's removal still takes the emptied
        // machine for that voter (static entries match any directory) and may be elected with
        // its vote: the amnesia no protocol survives. So a static founder is never wiped, even
        // after its removal committed. Keyed founders are: their lost disk restarts with their
        // unchanged configuration, which names them a voter.
        if world.is_static_founder(group, id) {
            return false;
        }
        let state = lock(&self.state);
        let Some(s) = state.groups.get(&group) else {
            return true;
        };
        s.possible.iter().all(|set| match set.get(id) {
            None => true,
            Some(v) => {
                v.directory.is_some()
                    && set.len() >= 3
                    && set
                        .iter()
                        .filter(|(other, _)| *other != id)
                        .all(|(other, ov)| ov.directory == Some(world.directory_of(other)))
            }
        })
    }
}

/// The set after `change`, or `None` when the change is impossible on it.
fn apply(set: &VoterSet, change: &VoterChange) -> Option<VoterSet> {
    match change {
        VoterChange::Add {
            id,
            directory,
            endpoint,
        } => set
            .with_added(
                *id,
                Voter {
                    directory: Some(*directory),
                    endpoint: endpoint.clone(),
                },
            )
            .ok(),
        VoterChange::Remove { id, directory } => set.with_removed(*id, *directory).ok(),
        // Never drawn here: the driver pins on its own, which `fits` allows for.
        VoterChange::PinDirectories => None,
        VoterChange::Update {
            id,
            directory,
            endpoint,
        } => set.with_endpoint(*id, *directory, endpoint.clone()).ok(),
    }
}

/// Whether the set a cluster ended on is `possible` as the outcomes allow, give or take the
/// driver's pins: a static entry of `possible` may have been bound to a directory
/// (`VoterChange::PinDirectories`), never the other way round.
fn fits(possible: &VoterSet, ended: &VoterSet) -> bool {
    possible.len() == ended.len()
        && possible.iter().all(|(id, p)| {
            ended.get(id).is_some_and(|e| {
                e.endpoint == p.endpoint && (p.directory.is_none() || p.directory == e.directory)
            })
        })
}

/// A set as text, for comparisons and messages.
pub(super) fn describe(set: &VoterSet) -> String {
    let entries: Vec<String> = set
        .iter()
        .map(|(id, v)| match v.directory {
            Some(d) => format!("{id}@{d}"),
            None => id.to_string(),
        })
        .collect();
    format!("{{{}}}", entries.join(", "))
}

/// What a caller of `change_voters` was told, by the contract of [`VoterChangeError`].
fn told(result: &Result<crate::driver::Committed, VoterChangeError>) -> Told {
    match result {
        Ok(_) => Told::Committed,
        Err(VoterChangeError::Refused(_)) => Told::NotApplied,
        Err(VoterChangeError::NotConfirmed(e)) => match e {
            WriteError::Refused(_)
            | WriteError::Lost(_)
            | WriteError::NotSent { .. }
            | WriteError::Superseded => Told::NotApplied,
            _ => Told::Unknown,
        },
    }
}

/// The membership schedule: until `until`, a voter change, a disk loss or a restart with an
/// edited configuration every 0.3 to 1.5 s, divided by the number of live groups (a change in
/// one of them, drawn; a disk loss or an edit as often per host as with one group).
pub(super) async fn run_membership(
    world: Arc<World>,
    membership: Arc<Membership>,
    seed: u64,
    until: tokio::time::Instant,
) {
    let mut rng = SimRng::new(seed ^ 0x6d65_6d62);
    while tokio::time::Instant::now() < until {
        // Each group sees changes as often as a one-group run does; disks are lost and files
        // edited per host, as often as ever.
        let groups = world.live_groups().len().max(1);
        let pause = rng.range(300, 1_500) / groups as u64;
        tokio::time::sleep(Duration::from_millis(pause)).await;
        if rng.chance(0.15 / groups as f64) {
            wipe_one(&world, &membership, &mut rng).await;
            continue;
        }
        if rng.chance(0.1 / groups as f64) {
            restart_edited(&world, &membership, &mut rng).await;
            continue;
        }
        let Some(group) = pick_group(&world.live_groups(), &mut rng) else {
            continue;
        };
        let Some((leader, set)) = leader_and_set(&world, group).await else {
            continue;
        };
        let Some(change) = pick_change(&world, &set, &mut rng) else {
            continue;
        };
        let asked = leader.id();
        world.note(format_args!("{group}: change {change:?} asked of {asked}"));
        let result = leader.change_voters(change.clone(), CHANGE_TIMEOUT).await;
        world.note(format_args!("{group}: change {change:?}: {result:?}"));
        membership.record(group, change, told(&result));
    }
}

/// One of `groups`, drawn (no draw when there is one, so that a one-group run draws as it
/// did before groups).
pub(super) fn pick_group(groups: &[GroupId], rng: &mut SimRng) -> Option<GroupId> {
    match groups {
        [] => None,
        [one] => Some(*one),
        _ => Some(groups[rng.below(groups.len() as u64) as usize]),
    }
}

/// A running replica of `group` that believes it leads, and the voter set it acts on.
async fn leader_and_set(world: &World, group: GroupId) -> Option<(Node, VoterSet)> {
    for i in 0..world.len() {
        if let Some((node, _)) = world.live(i, group) {
            if let Some(status) = node.status().await {
                if status.role == Role::Leader {
                    return Some((node, status.voter_set));
                }
            }
        }
    }
    None
}

/// A change for `set`: first the removal of a key whose disk was lost, else an addition
/// (growing to [`VOTERS_MAX`]) or a removal (down to one voter, the leader included; none
/// while a lost key votes).
fn pick_change(world: &World, set: &VoterSet, rng: &mut SimRng) -> Option<VoterChange> {
    let lost: Vec<(ReplicaId, Option<DirectoryId>)> = set
        .iter()
        .filter(|(id, v)| v.directory.is_some_and(|d| d != world.directory_of(*id)))
        .map(|(id, v)| (id, v.directory))
        .collect();
    if let Some(&(id, directory)) = lost.first() {
        if rng.chance(0.7) {
            return Some(VoterChange::Remove { id, directory });
        }
    }
    // While a lost key votes, removing any other voter may leave a set whose majority needs
    // the lost one (three voters, one lost, one removed: stuck for good). An operator removes
    // the lost key first; the schedule does too, or adds.
    let may_shrink = lost.is_empty();
    let outside: Vec<ReplicaId> = (0..world.len())
        .map(|i| world.id(i))
        .filter(|id| !set.contains_id(*id))
        .collect();
    let grow = set.len() < VOTERS_MAX && !outside.is_empty() && (set.len() == 1 || rng.chance(0.5));
    if grow {
        let id = outside[rng.below(outside.len() as u64) as usize];
        return Some(VoterChange::Add {
            id,
            directory: world.directory_of(id),
            endpoint: format!("sim-{id}"),
        });
    }
    if set.len() > 1 && may_shrink {
        let ids: Vec<(ReplicaId, Option<DirectoryId>)> =
            set.iter().map(|(id, v)| (id, v.directory)).collect();
        let (id, directory) = ids[rng.below(ids.len() as u64) as usize];
        return Some(VoterChange::Remove { id, directory });
    }
    None
}

/// Loses one host's disk where that is survivable, and restarts it later as a new replica.
async fn wipe_one(world: &Arc<World>, membership: &Membership, rng: &mut SimRng) {
    let i = rng.below(world.len() as u64) as usize;
    let id = world.id(i);
    if !membership.may_wipe(world, id) {
        return;
    }
    world.wipe(i).await;
    lock(&membership.state).wipes += 1;
    // The machine comes back with the file it had (its original configuration), or, as a
    // replacement set up with `--join`, with the voters it learns from the cluster when it
    // starts: itself among them while its old key votes (`World::start`).
    world.replace_later(i, rng.chance(0.3));
    let w = world.clone();
    let down = Duration::from_millis(rng.range(100, 2_000));
    tokio::spawn(async move {
        tokio::time::sleep(down).await;
        w.start(i).await;
    });
}

/// The operator edits one running host's voter list of one group and restarts the host: the
/// list becomes only itself (a standalone file), the set in force, or any ids. Its storage
/// holds a voter set, so the stored set must win; a later start on a lost disk reads the
/// edited file too.
async fn restart_edited(world: &Arc<World>, membership: &Membership, rng: &mut SimRng) {
    let i = rng.below(world.len() as u64) as usize;
    if world.live_host(i).is_none() {
        return;
    }
    let Some(group) = pick_group(&world.live_groups(), rng) else {
        return;
    };
    let id = world.id(i);
    let all: Vec<ReplicaId> = (0..world.len()).map(|j| world.id(j)).collect();
    let voters = match rng.below(3) {
        0 => vec![id],
        1 => world.learned_voters(i, group).await,
        _ => {
            let picked: Vec<ReplicaId> = all.iter().copied().filter(|_| rng.chance(0.5)).collect();
            if picked.is_empty() {
                vec![all[rng.below(all.len() as u64) as usize]]
            } else {
                picked
            }
        }
    };
    world.crash(i).await;
    world.set_voters_file(i, group, voters);
    lock(&membership.state).edits += 1;
    let w = world.clone();
    let down = Duration::from_millis(rng.range(50, 1_000));
    tokio::spawn(async move {
        tokio::time::sleep(down).await;
        w.start(i).await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyed(entries: &[(u32, u128)]) -> VoterSet {
        VoterSet::from_entries(entries.iter().map(|&(id, d)| {
            (
                ReplicaId(id),
                Voter {
                    directory: Some(DirectoryId(d)),
                    endpoint: String::new(),
                },
            )
        }))
        .expect("a valid set")
    }

    fn add(id: u32, d: u128) -> VoterChange {
        VoterChange::Add {
            id: ReplicaId(id),
            directory: DirectoryId(d),
            endpoint: String::new(),
        }
    }

    const G: GroupId = GroupId(3);

    fn following(initial: VoterSet) -> Membership {
        let m = Membership::default();
        m.add_group(G, initial);
        m
    }

    fn possible(m: &Membership) -> Vec<VoterSet> {
        lock(&m.state).groups[&G].possible.clone()
    }

    #[test]
    fn outcomes_narrow_and_split_the_possible_sets() {
        let m = following(keyed(&[(1, 1)]));
        m.record(G, add(2, 2), Told::Unknown);
        assert_eq!(possible(&m).len(), 2, "unknown splits");
        m.record(G, add(3, 3), Told::NotApplied);
        assert_eq!(possible(&m).len(), 2, "a refusal changes nothing");
        // Adding 2 again can only commit where the first add did not take effect.
        m.record(G, add(2, 2), Told::Committed);
        assert_eq!(possible(&m), vec![keyed(&[(1, 1), (2, 2)])]);
        assert!(lock(&m.state).groups[&G].violations.is_empty());
    }

    #[test]
    fn a_commit_no_history_allows_is_a_violation() {
        let m = following(keyed(&[(1, 1)]));
        m.record(G, add(2, 2), Told::Committed);
        m.record(G, add(2, 2), Told::Committed);
        let s = lock(&m.state);
        let violations = &s.groups[&G].violations;
        assert_eq!(violations.len(), 1, "{violations:?}");
    }

    #[test]
    fn one_group_draws_nothing() {
        let mut rng = SimRng::new(9);
        let mut same = SimRng::new(9);
        assert_eq!(pick_group(&[G], &mut rng), Some(G));
        assert_eq!(rng.below(1_000), same.below(1_000));
        assert_eq!(pick_group(&[], &mut rng), None);
    }
}
