//! What the client knows about where things are: the known node addresses, the node behind
//! each id, and the last address that answered as the leader of each show and each group.
//!
//! Owns the caches and the choice of the next address to try. Never calls a node: the call
//! loop reports successes and failures here and asks where to go next. Everything here is a
//! hint (a stale entry costs one redirected attempt), so it is kept in plain hash maps.

use std::collections::HashMap;

/// Whose leader a call needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// The leader of the group the show lives in.
    Show(u64),
    /// The leader of a group.
    Group(u64),
    /// Any node (a call every node answers itself, such as issuing a session): nothing is
    /// cached about who answered.
    Any,
}

/// The caches behind leader discovery.
#[derive(Debug, Default)]
pub(crate) struct Routes {
    /// Every address the client knows, in the order it learned them.
    addresses: Vec<String>,
    /// Where the next attempt without a cached leader starts.
    cursor: usize,
    /// Show → the address that last answered a call about it.
    show_leaders: HashMap<u64, String>,
    /// Show → its group, from placements.
    show_groups: HashMap<u64, u64>,
    /// Group → the address of its last known leader.
    group_leaders: HashMap<u64, String>,
    /// Node id → its address, from status replies and hints.
    nodes: HashMap<u64, String>,
}

impl Routes {
    /// Caches for these (normalized, deduplicated) addresses.
    pub(crate) fn new(addresses: Vec<String>) -> Routes {
        Routes { addresses, ..Routes::default() }
    }

    /// Every known address.
    pub(crate) fn addresses(&self) -> &[String] {
        &self.addresses
    }

    /// Adds an address learned from a hint or a status reply.
    pub(crate) fn learn_address(&mut self, address: &str) {
        if !self.addresses.iter().any(|known| known == address) {
            self.addresses.push(address.to_owned());
        }
    }

    /// Records a node's address.
    pub(crate) fn learn_node(&mut self, node_id: u64, address: &str) {
        if node_id != 0 {
            self.nodes.insert(node_id, address.to_owned());
        }
        self.learn_address(address);
    }

    /// The address of a node, if known.
    pub(crate) fn node_address(&self, node_id: u64) -> Option<&str> {
        self.nodes.get(&node_id).map(String::as_str)
    }

    /// Records the group a show lives in.
    pub(crate) fn learn_show_group(&mut self, show: u64, group: u64) {
        self.show_groups.insert(show, group);
    }

    /// Records an address as the leader of a group.
    pub(crate) fn learn_group_leader(&mut self, group: u64, address: &str) {
        self.group_leaders.insert(group, address.to_owned());
        self.learn_address(address);
    }

    /// Forgets a group's cached leader (leadership is moving).
    pub(crate) fn forget_group_leader(&mut self, group: u64) {
        self.group_leaders.remove(&group);
    }

    /// The cached leader of a route, if any.
    pub(crate) fn leader(&self, route: Route) -> Option<&str> {
        match route {
            Route::Show(show) => self.show_leaders.get(&show).or_else(|| {
                self.show_groups.get(&show).and_then(|group| self.group_leaders.get(group))
            }),
            Route::Group(group) => self.group_leaders.get(&group),
            Route::Any => None,
        }
        .map(String::as_str)
    }

    /// Where the first attempt of a call goes: the cached leader, else the next known address.
    pub(crate) fn first_target(&mut self, route: Route) -> String {
        match self.leader(route) {
            Some(address) => address.to_owned(),
            None => self.next_address(None),
        }
    }

    /// Records that `address` answered a call of `route` successfully.
    pub(crate) fn on_success(&mut self, route: Route, address: &str) {
        match route {
            Route::Show(show) => {
                self.show_leaders.insert(show, address.to_owned());
                if let Some(group) = self.show_groups.get(&show).copied() {
                    self.group_leaders.insert(group, address.to_owned());
                }
            }
            Route::Group(group) => {
                self.group_leaders.insert(group, address.to_owned());
            }
            Route::Any => {}
        }
    }

    /// Forgets the cached leader of `route` if it is `address` (it failed without a hint).
    pub(crate) fn on_failure(&mut self, route: Route, address: &str) {
        let forget = |map: &mut HashMap<u64, String>, key: u64| {
            if map.get(&key).is_some_and(|cached| cached == address) {
                map.remove(&key);
            }
        };
        match route {
            Route::Show(show) => {
                forget(&mut self.show_leaders, show);
                if let Some(group) = self.show_groups.get(&show).copied() {
                    forget(&mut self.group_leaders, group);
                }
            }
            Route::Group(group) => forget(&mut self.group_leaders, group),
            Route::Any => {}
        }
    }

    /// The known address after `failed` (or at the cursor), advancing the cursor so that
    /// concurrent calls that find no leader spread over the nodes.
    pub(crate) fn next_address(&mut self, failed: Option<&str>) -> String {
        let count = self.addresses.len();
        assert!(count > 0, "a client always knows at least one address");
        let position = failed
            .and_then(|failed| self.addresses.iter().position(|known| known == failed))
            .map_or(self.cursor % count, |position| (position + 1) % count);
        self.cursor = (position + 1) % count;
        self.addresses[position].clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routes() -> Routes {
        Routes::new(vec!["a:1".into(), "b:2".into(), "c:3".into()])
    }

    #[test]
    fn without_leader_attempts_rotate_over_known_addresses() {
        let mut routes = routes();
        let first = routes.first_target(Route::Show(7));
        assert_eq!(first, "a:1");
        assert_eq!(routes.next_address(Some(&first)), "b:2");
        assert_eq!(routes.next_address(Some("b:2")), "c:3");
        assert_eq!(routes.next_address(Some("c:3")), "a:1");
        // An address the client does not know continues at the cursor.
        assert_eq!(routes.next_address(Some("z:9")), "b:2");
    }

    #[test]
    fn success_caches_the_leader_per_show_and_group() {
        let mut routes = routes();
        routes.learn_show_group(7, 2);
        routes.on_success(Route::Show(7), "c:3");
        assert_eq!(routes.first_target(Route::Show(7)), "c:3");
        // Another show of the same group goes to the same leader.
        routes.learn_show_group(8, 2);
        assert_eq!(routes.leader(Route::Show(8)), Some("c:3"));
        assert_eq!(routes.leader(Route::Group(2)), Some("c:3"));
        assert_eq!(routes.leader(Route::Group(1)), None);
    }

    #[test]
    fn failure_forgets_only_the_failed_leader() {
        let mut routes = routes();
        routes.learn_group_leader(1, "b:2");
        routes.on_failure(Route::Group(1), "a:1");
        assert_eq!(routes.leader(Route::Group(1)), Some("b:2"));
        routes.on_failure(Route::Group(1), "b:2");
        assert_eq!(routes.leader(Route::Group(1)), None);
    }

    #[test]
    fn any_route_caches_nothing() {
        let mut routes = routes();
        routes.learn_group_leader(0, "b:2");
        assert_eq!(routes.first_target(Route::Any), "a:1");
        routes.on_success(Route::Any, "c:3");
        routes.on_failure(Route::Any, "b:2");
        assert_eq!(routes.leader(Route::Any), None);
        assert_eq!(routes.leader(Route::Group(0)), Some("b:2"));
        assert_eq!(routes.leader(Route::Show(1)), None);
    }

    #[test]
    fn learned_addresses_join_the_rotation_once() {
        let mut routes = routes();
        routes.learn_node(4, "d:4");
        routes.learn_node(4, "d:4");
        routes.learn_group_leader(3, "e:5");
        assert_eq!(routes.addresses(), ["a:1", "b:2", "c:3", "d:4", "e:5"]);
        assert_eq!(routes.node_address(4), Some("d:4"));
    }
}
