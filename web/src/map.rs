//! The cluster map: every member as a box inside a frame for the machine it runs on, the
//! leader and singleton hosts marked, silent agents greyed, arrows from each observer to the
//! member it cannot reach, and each router's routees with a bar of their latest mailbox depth.
//!
//! The geometry is computed here ([`ClusterMap::layout`]); the template only draws it. Every
//! number a template puts into an SVG attribute comes from this module; every text goes through
//! the template's HTML escaping. Long texts are cut to fit their box, the whole text stays in
//! the element's `<title>`.
//!
//! # Layout
//! Machines flow left to right and wrap into rows; a machine with more hosts than fit in one
//! row of the map wraps its boxes into several rows. The map is [`WIDTH`] wide whatever the
//! cluster's size and grows downwards, so 3 nodes read as three boxes and 50 as a few rows.

use std::collections::{BTreeMap, HashMap};

/// Width of the map's view box.
pub const WIDTH: i64 = 1200;
const MARGIN: i64 = 8;
const GAP: i64 = 12;
// Two machines of three hosts fit side by side.
const NODE_W: i64 = 180;
const NODE_H: i64 = 72;
const PAD: i64 = 8;
const MACHINE_HEAD: i64 = 22;
/// Characters of a monospace address that fit a box.
const ADDRESS_CHARS: usize = 22;
/// Characters of proportional text that fit a box.
const TEXT_CHARS: usize = 27;
const MACHINE_CHARS: usize = 22;
const ROUTER_CHARS: usize = 70;
const ROUTEE_CHARS: usize = 22;
const ROUTEE_W: i64 = 296;
const ROUTEE_H: i64 = 18;
const BAR_X: i64 = 168;
const BAR_W: i64 = 90;
const ROUTER_HEAD: i64 = 24;

/// What the map is drawn from: one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapMember {
    /// Its address.
    pub address: String,
    /// The machine its agent reports (`NODE_NAME`), if any.
    pub machine: Option<String>,
    /// Its status (`up`, `leaving`, …).
    pub status: String,
    /// Badge class of the status.
    pub status_class: &'static str,
    /// Its roles.
    pub roles: Vec<String>,
    /// Its agent's health as shown ("" without an agent).
    pub health: String,
    /// It leads the cluster.
    pub leader: bool,
    /// Its agent has sent nothing for longer than the silence limit.
    pub silent: bool,
    /// The singletons it hosts.
    pub singletons: Vec<String>,
    /// Its node page.
    pub href: String,
}

/// What the map is drawn from: one router.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapRouter {
    /// Its path.
    pub path: String,
    /// Its strategy.
    pub strategy: String,
    /// Each routee's address and its latest mailbox depth (`None`: no recent sample).
    pub routees: Vec<(String, Option<u32>)>,
}

/// A machine's frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineFrame {
    /// Left edge.
    pub x: i64,
    /// Top edge.
    pub y: i64,
    /// Width.
    pub w: i64,
    /// Height.
    pub h: i64,
    /// The machine's name as reported ("" when its agents report none).
    pub name: String,
    /// What the frame says: the name (cut to fit) and its hosts.
    pub label: String,
    /// The whole name and count, for the tooltip.
    pub title: String,
    /// Members on it.
    pub hosts: usize,
}

/// A member's box.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeBox {
    /// Left edge.
    pub x: i64,
    /// Top edge.
    pub y: i64,
    /// Width.
    pub w: i64,
    /// Height.
    pub h: i64,
    /// Its address (whole).
    pub address: String,
    /// Its address, cut to fit.
    pub label: String,
    /// Its node page.
    pub href: String,
    /// Status and health, cut to fit.
    pub state: String,
    /// Badge class of the status.
    pub status_class: &'static str,
    /// Its status.
    pub status: String,
    /// Its roles, cut to fit ("" for none).
    pub roles: String,
    /// It leads the cluster.
    pub leader: bool,
    /// The singletons it hosts, cut to fit ("" for none).
    pub singletons: String,
    /// How many singletons it hosts.
    pub singleton_count: usize,
    /// Its agent is silent.
    pub silent: bool,
    /// Everything about it in words (the tooltip).
    pub title: String,
}

/// An arrow from an observer to a member it cannot reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrow {
    /// Start x (the observer's box edge).
    pub x1: i64,
    /// Start y.
    pub y1: i64,
    /// End x (the subject's box edge).
    pub x2: i64,
    /// End y.
    pub y2: i64,
    /// Who cannot reach.
    pub observer: String,
    /// Whom.
    pub subject: String,
    /// In words.
    pub title: String,
}

/// One routee row: its address and a bar of its latest mailbox depth.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteeRow {
    /// Left edge of the row.
    pub x: i64,
    /// Baseline of the row's text.
    pub y: i64,
    /// Its address (whole).
    pub address: String,
    /// Its address, cut to fit.
    pub label: String,
    /// Bar track's left edge.
    pub bar_x: i64,
    /// Bar track's top edge.
    pub bar_y: i64,
    /// Track width.
    pub bar_w: i64,
    /// Filled width (the depth against the router's deepest routee).
    pub fill_w: i64,
    /// The depth as text, or "no sample".
    pub depth_text: String,
    /// The depth (`None`: no recent sample).
    pub depth: Option<u32>,
    /// The depth text's x.
    pub text_x: i64,
    /// In words.
    pub title: String,
}

/// A router's block: its path and its routees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterBlock {
    /// Left edge.
    pub x: i64,
    /// Baseline of its heading.
    pub y: i64,
    /// Its path (whole).
    pub path: String,
    /// Heading: path (cut to fit), strategy and routee count.
    pub label: String,
    /// Its routees.
    pub routees: Vec<RouteeRow>,
}

/// The map, laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterMap {
    /// View-box width.
    pub width: i64,
    /// View-box height.
    pub height: i64,
    /// Machine frames.
    pub machines: Vec<MachineFrame>,
    /// Member boxes.
    pub nodes: Vec<NodeBox>,
    /// Unreachability arrows.
    pub arrows: Vec<Arrow>,
    /// Routers and their routees.
    pub routers: Vec<RouterBlock>,
    /// One sentence for screen readers.
    pub summary: String,
    /// Nothing to draw.
    pub empty: bool,
}

/// `text` cut to `max` characters, ending in "…" when cut.
#[must_use]
pub fn fit(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

impl ClusterMap {
    /// Lays out `members` (grouped by machine, in address order within one), the arrows of
    /// `unreachable` (`(observer, subject)` pairs; a pair naming a member not on the map is
    /// left out) and `routers`.
    #[must_use]
    pub fn layout(
        members: &[MapMember],
        unreachable: &[(String, String)],
        routers: &[MapRouter],
    ) -> Self {
        let inner = WIDTH - 2 * MARGIN;
        // Machines by name, the unreported ones last.
        let mut by_machine: BTreeMap<(bool, &str), Vec<&MapMember>> = BTreeMap::new();
        for m in members {
            let key = match m.machine.as_deref() {
                Some(name) if !name.is_empty() => (false, name),
                _ => (true, ""),
            };
            by_machine.entry(key).or_default().push(m);
        }
        let max_cols = ((inner - 2 * PAD + GAP) / (NODE_W + GAP)).max(1);
        let mut machines = Vec::new();
        let mut nodes = Vec::new();
        let (mut x, mut y, mut row_h) = (MARGIN, MARGIN, 0);
        for ((_, name), mut hosted) in by_machine {
            hosted.sort_by(|a, b| a.address.cmp(&b.address));
            let n = hosted.len() as i64;
            let cols = n.min(max_cols);
            let rows = (n + cols - 1) / cols;
            let w = 2 * PAD + cols * NODE_W + (cols - 1) * GAP;
            let h = MACHINE_HEAD + PAD + rows * NODE_H + (rows - 1) * GAP;
            if x > MARGIN && x + w > WIDTH - MARGIN {
                x = MARGIN;
                y += row_h + GAP;
                row_h = 0;
            }
            let hosts = plural(hosted.len(), "host", "hosts");
            let shown = if name.is_empty() {
                "machine not reported"
            } else {
                name
            };
            machines.push(MachineFrame {
                x,
                y,
                w,
                h,
                name: name.to_owned(),
                label: format!("{} · {hosts}", fit(shown, MACHINE_CHARS)),
                title: format!("{shown}: {hosts}"),
                hosts: hosted.len(),
            });
            for (i, m) in hosted.into_iter().enumerate() {
                let (col, row) = (i as i64 % cols, i as i64 / cols);
                nodes.push(node_box(
                    m,
                    x + PAD + col * (NODE_W + GAP),
                    y + MACHINE_HEAD + row * (NODE_H + GAP),
                ));
            }
            x += w + GAP;
            row_h = row_h.max(h);
        }
        let mut height = y + row_h + MARGIN;
        let arrows = arrows(&nodes, unreachable);
        let mut blocks = Vec::new();
        let per_row = ((inner + GAP) / (ROUTEE_W + GAP)).max(1);
        for router in routers {
            let top = height + 6;
            let deepest = router
                .routees
                .iter()
                .filter_map(|(_, d)| *d)
                .max()
                .unwrap_or(0)
                .max(1);
            let rows = router
                .routees
                .iter()
                .enumerate()
                .map(|(i, (address, depth))| {
                    let (col, row) = (i as i64 % per_row, i as i64 / per_row);
                    let rx = MARGIN + col * (ROUTEE_W + GAP);
                    let ry = top + ROUTER_HEAD + row * ROUTEE_H;
                    let fill_w = depth.map_or(0, |d| i64::from(d) * BAR_W / i64::from(deepest));
                    let depth_text =
                        depth.map_or_else(|| "no sample".to_owned(), |d| d.to_string());
                    RouteeRow {
                        x: rx,
                        y: ry + 13,
                        label: fit(address, ROUTEE_CHARS),
                        bar_x: rx + BAR_X,
                        bar_y: ry + 4,
                        bar_w: BAR_W,
                        fill_w: if depth.is_some_and(|d| d > 0) {
                            fill_w.max(1)
                        } else {
                            0
                        },
                        text_x: rx + BAR_X + BAR_W + 6,
                        title: match depth {
                            Some(d) => format!(
                                "{address}: {} waiting in the routee's mailbox (latest sample)",
                                plural(*d as usize, "message", "messages")
                            ),
                            None => format!("{address}: no mailbox sample in the last minute"),
                        },
                        depth_text,
                        depth: *depth,
                        address: address.clone(),
                    }
                })
                .collect::<Vec<_>>();
            let lines = (router.routees.len() as i64 + per_row - 1) / per_row;
            blocks.push(RouterBlock {
                x: MARGIN,
                y: top + 14,
                label: format!(
                    "router {} · {} · {}",
                    fit(&router.path, ROUTER_CHARS),
                    router.strategy,
                    plural(router.routees.len(), "routee", "routees")
                ),
                path: router.path.clone(),
                routees: rows,
            });
            height = top + ROUTER_HEAD + lines.max(1) * ROUTEE_H + MARGIN;
        }
        let leader = members
            .iter()
            .find(|m| m.leader)
            .map(|m| m.address.as_str());
        let summary = format!(
            "{} on {}; leader {}; {} of unreachability; {} silent; {}",
            plural(members.len(), "member", "members"),
            plural(machines.len(), "machine", "machines"),
            leader.unwrap_or("none"),
            plural(arrows.len(), "report", "reports"),
            members.iter().filter(|m| m.silent).count(),
            plural(routers.len(), "router", "routers"),
        );
        Self {
            width: WIDTH,
            height,
            empty: members.is_empty(),
            machines,
            nodes,
            arrows,
            routers: blocks,
            summary,
        }
    }
}

fn node_box(m: &MapMember, x: i64, y: i64) -> NodeBox {
    let state = if m.health.is_empty() {
        format!("{} · no agent", m.status)
    } else {
        format!("{} · {}", m.status, m.health)
    };
    let roles = m.roles.join(", ");
    let singletons = m.singletons.join(", ");
    let mut title = format!("{} — {state}", m.address);
    if !roles.is_empty() {
        title.push_str(&format!("; roles {roles}"));
    }
    if m.leader {
        title.push_str("; leader");
    }
    if !singletons.is_empty() {
        title.push_str(&format!("; hosts singleton {singletons}"));
    }
    if m.silent {
        title.push_str("; its agent has gone silent");
    }
    NodeBox {
        x,
        y,
        w: NODE_W,
        h: NODE_H,
        label: fit(
            &m.address,
            if m.leader {
                ADDRESS_CHARS - 2
            } else {
                ADDRESS_CHARS
            },
        ),
        address: m.address.clone(),
        href: m.href.clone(),
        state: fit(&state, TEXT_CHARS),
        status_class: m.status_class,
        status: m.status.clone(),
        roles: if roles.is_empty() {
            String::new()
        } else {
            fit(&format!("roles: {roles}"), TEXT_CHARS)
        },
        leader: m.leader,
        singletons: if singletons.is_empty() {
            String::new()
        } else {
            fit(&format!("◆ {singletons}"), TEXT_CHARS)
        },
        singleton_count: m.singletons.len(),
        silent: m.silent,
        title,
    }
}

/// Where the segment from the centre of a box (half sizes `hw`, `hh`) towards `(dx, dy)`
/// leaves it, as a share of `(dx, dy)`.
fn exit(dx: f64, dy: f64, hw: f64, hh: f64) -> f64 {
    let tx = if dx == 0.0 {
        f64::INFINITY
    } else {
        hw / dx.abs()
    };
    let ty = if dy == 0.0 {
        f64::INFINITY
    } else {
        hh / dy.abs()
    };
    tx.min(ty)
}

fn arrows(nodes: &[NodeBox], unreachable: &[(String, String)]) -> Vec<Arrow> {
    let at: HashMap<&str, &NodeBox> = nodes.iter().map(|n| (n.address.as_str(), n)).collect();
    let mut out = Vec::new();
    for (observer, subject) in unreachable {
        let (Some(from), Some(to)) = (at.get(observer.as_str()), at.get(subject.as_str())) else {
            continue;
        };
        if observer == subject {
            continue;
        }
        let (cx1, cy1) = ((from.x + from.w / 2) as f64, (from.y + from.h / 2) as f64);
        let (cx2, cy2) = ((to.x + to.w / 2) as f64, (to.y + to.h / 2) as f64);
        let (dx, dy) = (cx2 - cx1, cy2 - cy1);
        let len = (dx * dx + dy * dy).sqrt().max(1.0);
        // Arrows both ways between two boxes run side by side, not on top of each other.
        let side = if observer < subject { 5.0 } else { -5.0 };
        let (ox, oy) = (-dy / len * side, dx / len * side);
        let (hw, hh) = (
            f64::from(NODE_W as i32) / 2.0,
            f64::from(NODE_H as i32) / 2.0,
        );
        let t = exit(dx, dy, hw, hh);
        out.push(Arrow {
            x1: (cx1 + dx * t + ox).round() as i64,
            y1: (cy1 + dy * t + oy).round() as i64,
            x2: (cx2 - dx * t + ox).round() as i64,
            y2: (cy2 - dy * t + oy).round() as i64,
            title: format!("{observer} cannot reach {subject}"),
            observer: observer.clone(),
            subject: subject.clone(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(address: &str, machine: Option<&str>) -> MapMember {
        MapMember {
            address: address.to_owned(),
            machine: machine.map(str::to_owned),
            status: "up".to_owned(),
            status_class: "ok",
            roles: vec!["worker".to_owned()],
            health: "ready".to_owned(),
            leader: false,
            silent: false,
            singletons: Vec::new(),
            href: format!("/ui/node?node={address}"),
        }
    }

    fn inside(n: &NodeBox, f: &MachineFrame) -> bool {
        n.x >= f.x && n.y >= f.y && n.x + n.w <= f.x + f.w && n.y + n.h <= f.y + f.h
    }

    #[test]
    fn members_sit_inside_their_machines_frame_and_frames_count_their_hosts() {
        let members = [
            member("10.0.0.2:1", Some("m1")),
            member("10.0.0.1:1", Some("m1")),
            member("10.0.0.3:1", None),
        ];
        let map = ClusterMap::layout(&members, &[], &[]);
        assert_eq!(map.machines.len(), 2);
        assert_eq!(map.machines[0].label, "m1 · 2 hosts");
        assert_eq!(map.machines[1].label, "machine not reported · 1 host");
        assert_eq!(
            map.nodes[0].address, "10.0.0.1:1",
            "address order in a machine"
        );
        assert!(inside(&map.nodes[0], &map.machines[0]));
        assert!(inside(&map.nodes[1], &map.machines[0]));
        assert!(inside(&map.nodes[2], &map.machines[1]));
    }

    #[test]
    fn fifty_members_wrap_into_rows_within_the_width_without_overlapping() {
        let members: Vec<MapMember> = (0..50)
            .map(|i| member(&format!("10.0.{i}.1:2552"), Some(&format!("m{}", i / 3))))
            .collect();
        let map = ClusterMap::layout(&members, &[], &[]);
        assert_eq!(map.nodes.len(), 50);
        for f in &map.machines {
            assert!(f.x >= 0 && f.x + f.w <= WIDTH, "{f:?}");
        }
        for (i, a) in map.nodes.iter().enumerate() {
            for b in &map.nodes[i + 1..] {
                let apart =
                    a.x + a.w <= b.x || b.x + b.w <= a.x || a.y + a.h <= b.y || b.y + b.h <= a.y;
                assert!(apart, "{a:?} overlaps {b:?}");
            }
        }
        assert!(map.height > 3 * NODE_H, "several rows");
        assert!(
            map.machines
                .iter()
                .filter(|f| f.y == map.machines[0].y)
                .count()
                >= 2,
            "machines of three hosts share a row: {:?}",
            map.machines
                .iter()
                .map(|f| (f.x, f.y, f.w))
                .collect::<Vec<_>>()
        );
        // One machine with more hosts than a row holds wraps inside its frame.
        let crowded: Vec<MapMember> = (0..20)
            .map(|i| member(&format!("10.1.0.{i}:2552"), Some("big")))
            .collect();
        let map = ClusterMap::layout(&crowded, &[], &[]);
        assert_eq!(map.machines.len(), 1);
        assert!(map.machines[0].x + map.machines[0].w <= WIDTH);
        assert!(map.nodes.iter().all(|n| inside(n, &map.machines[0])));
    }

    #[test]
    fn long_names_are_cut_with_an_ellipsis_and_kept_whole_in_the_title() {
        let long = "a-very-long-host-name.example.internal:2552";
        let map = ClusterMap::layout(&[member(long, Some(long))], &[], &[]);
        assert_eq!(map.nodes[0].label.chars().count(), ADDRESS_CHARS);
        assert!(map.nodes[0].label.ends_with('…'));
        assert!(map.nodes[0].title.starts_with(long));
        assert!(map.machines[0].title.starts_with(long));
        assert_eq!(fit("short", 10), "short");
    }

    #[test]
    fn arrows_run_from_the_observers_box_edge_to_the_subjects() {
        let members = [member("a", None), member("b", None)];
        let unreachable = [
            ("b".to_owned(), "a".to_owned()),
            ("a".to_owned(), "gone".to_owned()),
        ];
        let map = ClusterMap::layout(&members, &unreachable, &[]);
        assert_eq!(
            map.arrows.len(),
            1,
            "a pair naming no box on the map is left out"
        );
        let (arrow, a, b) = (&map.arrows[0], &map.nodes[0], &map.nodes[1]);
        assert_eq!(
            (arrow.observer.as_str(), arrow.subject.as_str()),
            ("b", "a")
        );
        // Side by side: from b's left edge to a's right edge.
        assert_eq!(arrow.x1, b.x);
        assert_eq!(arrow.x2, a.x + a.w);
        assert_eq!(arrow.title, "b cannot reach a");
    }

    #[test]
    fn depth_bars_scale_to_the_routers_deepest_routee() {
        let router = MapRouter {
            path: "/user/orders".to_owned(),
            strategy: "round-robin".to_owned(),
            routees: vec![
                ("a".to_owned(), Some(40)),
                ("b".to_owned(), Some(10)),
                ("c".to_owned(), None),
                ("d".to_owned(), Some(0)),
            ],
        };
        let map = ClusterMap::layout(&[member("a", None)], &[], &[router]);
        let rows = &map.routers[0].routees;
        assert_eq!(rows[0].fill_w, BAR_W);
        assert_eq!(rows[1].fill_w, BAR_W / 4);
        assert_eq!(
            (rows[2].fill_w, rows[2].depth_text.as_str()),
            (0, "no sample")
        );
        assert_eq!(rows[3].fill_w, 0);
        assert!(map.height > rows[3].y, "the routers fit the view box");
    }
}
