//! A communicator's topology: the node and SuperPoD of each of its ranks, learned at init
//! (every rank brings its place to the rendezvous, [`crate::ipc::rendezvous`]), and what HCCL
//! derives from it: whether the communicator spans SuperPoDs (then it has no symmetric
//! windows and its collectives stage), and the rank graph that `HcclRankGraphGetLayers` &
//! co. answer (hicann/hcomm `src/coll_communicator_mgr/rank_graph/rank_graph.cc`,
//! `RankGraphV1::InitNetLayer`, for an Atlas A3): layer 0 is the rank's node (server), layer
//! 1, present when the communicator has more than one node, the rank's SuperPoD, and layer 2,
//! present when it has more than one SuperPoD, every rank.

use std::collections::BTreeMap;

use crate::acl::node::Place;

/// The place word a rank brings to its join: its node in the high half, its SuperPoD in the
/// low one.
pub(crate) fn word(place: Place) -> u64 {
    (u64::from(place.node) << 32) | u64::from(place.superpod)
}

/// The place a join's word names ([`word`]).
fn place_of(word: u64) -> Place {
    Place {
        node: (word >> 32) as u32,
        superpod: word as u32,
    }
}

/// One layer of the rank graph as the calling rank sees it.
pub(crate) struct Layer {
    /// The ranks of the calling rank's instance of the layer (its node, its SuperPoD, or
    /// every rank), in rank order.
    pub(crate) ranks: Vec<u32>,
    /// The rank count of every instance of the layer, in the order of the instances' indices
    /// (node or SuperPoD).
    pub(crate) instance_sizes: Vec<u32>,
}

/// Where every rank of a communicator is, and its rank graph from the calling rank.
pub(crate) struct Topology {
    /// Every rank's place, in rank order.
    places: Vec<Place>,
    /// How many SuperPoDs the ranks are in.
    superpods: usize,
    /// The layer numbers (0, 1, 2 as they exist), what `HcclRankGraphGetLayers` answers.
    pub(crate) layer_ids: Vec<u32>,
    /// The layers, by number.
    pub(crate) layers: Vec<Layer>,
}

impl Topology {
    /// The topology of ranks whose place words (in rank order) are `words`, seen from rank
    /// `rank`.
    pub(crate) fn from_words(words: &[u64], rank: u32) -> Topology {
        Topology::new(words.iter().copied().map(place_of).collect(), rank)
    }

    /// The topology of ranks at `places` (in rank order), seen from rank `rank`.
    pub(crate) fn new(places: Vec<Place>, rank: u32) -> Topology {
        let mine = places[rank as usize];
        let by = |key: fn(&Place) -> u32| {
            let mut groups: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
            for (r, p) in (0u32..).zip(&places) {
                groups.entry(key(p)).or_default().push(r);
            }
            groups
        };
        let (nodes, pods) = (by(|p| p.node), by(|p| p.superpod));
        let layer = |groups: &BTreeMap<u32, Vec<u32>>, at: u32| Layer {
            ranks: groups[&at].clone(),
            instance_sizes: groups.values().map(|g| g.len() as u32).collect(),
        };
        let mut layers = vec![layer(&nodes, mine.node)];
        if nodes.len() > 1 {
            layers.push(layer(&pods, mine.superpod));
        }
        if pods.len() > 1 {
            layers.push(Layer {
                ranks: (0..places.len() as u32).collect(),
                instance_sizes: vec![places.len() as u32],
            });
        }
        Topology {
            superpods: pods.len(),
            layer_ids: (0..layers.len() as u32).collect(),
            layers,
            places,
        }
    }

    /// Rank `rank`'s place.
    pub(crate) fn place(&self, rank: u32) -> Place {
        self.places[rank as usize]
    }

    /// Whether the ranks are in more than one SuperPoD: HCCL then makes no symmetric memory
    /// (hicann/hcomm `hccl_communicator_host.cc`, `HcclCommunicator::InitSymmetricMemory`:
    /// "Cross-SuperNode not support symmetric memory"), so registering a window fails and
    /// every collective stages.
    pub(crate) fn spans_superpods(&self) -> bool {
        self.superpods > 1
    }

    /// How many SuperPoDs the ranks are in.
    pub(crate) fn superpod_count(&self) -> usize {
        self.superpods
    }

    /// Whether the ranks' nodes rule out the symmetric path although the communicator has
    /// windows: its ranks are on several nodes and each node has one of them, or the nodes
    /// have different numbers of them. HCCL's `IsSupportSymmetricMemory` refuses
    /// `deviceNumPerAggregation_ == 1` and `multiModuleDiffDeviceNumMode_` (hicann/hcomm
    /// `hccl_communicator_host.cc`). (A one-rank communicator, which HCCL refuses the same
    /// way, is left as the emulator always had it.)
    pub(crate) fn nodes_rule_out_windows(&self) -> bool {
        let sizes = &self.layers[0].instance_sizes;
        let uneven = sizes.iter().any(|&s| s != sizes[0]);
        uneven || (sizes.len() > 1 && sizes[0] == 1)
    }
}

#[cfg(test)]
mod abi_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn at(node: u32, superpod: u32) -> Place {
        Place { node, superpod }
    }

    #[test]
    fn a_word_carries_a_place_both_ways() {
        for p in [at(0, 0), at(23, 0), at(4095, 170), at(7, 4095)] {
            assert_eq!(place_of(word(p)), p);
        }
    }

    #[test]
    fn one_node_has_one_layer() {
        let t = Topology::new(vec![at(0, 0); 4], 2);
        assert_eq!(t.layer_ids, [0]);
        assert_eq!(t.layers[0].ranks, [0, 1, 2, 3]);
        assert_eq!(t.layers[0].instance_sizes, [4]);
        assert!(!t.spans_superpods());
        assert!(!t.nodes_rule_out_windows());
        assert!(
            !Topology::new(vec![at(0, 0)], 0).nodes_rule_out_windows(),
            "one rank"
        );
    }

    #[test]
    fn nodes_of_one_superpod_have_two_layers_as_hccl_s_rank_graph() {
        // Two nodes of two ranks each, the ranks interleaved.
        let t = Topology::new(vec![at(0, 0), at(1, 0), at(0, 0), at(1, 0)], 1);
        assert_eq!(t.layer_ids, [0, 1]);
        assert_eq!(t.layers[0].ranks, [1, 3], "rank 1's node");
        assert_eq!(t.layers[0].instance_sizes, [2, 2]);
        assert_eq!(t.layers[1].ranks, [0, 1, 2, 3], "its SuperPoD");
        assert_eq!(t.layers[1].instance_sizes, [4]);
        assert!(!t.spans_superpods());
        assert!(!t.nodes_rule_out_windows());
        assert_eq!(t.place(3), at(1, 0));
    }

    #[test]
    fn superpods_add_a_third_layer_and_span() {
        // Nodes 0 and 1 in SuperPoD 0, node 2 in SuperPoD 1.
        let places = vec![at(0, 0), at(0, 0), at(1, 0), at(2, 1), at(2, 1)];
        let t = Topology::new(places, 3);
        assert_eq!(t.layer_ids, [0, 1, 2]);
        assert_eq!(t.layers[0].ranks, [3, 4]);
        assert_eq!(t.layers[0].instance_sizes, [2, 1, 2]);
        assert_eq!(t.layers[1].ranks, [3, 4], "rank 3's SuperPoD");
        assert_eq!(t.layers[1].instance_sizes, [3, 2]);
        assert_eq!(t.layers[2].ranks, [0, 1, 2, 3, 4]);
        assert_eq!(t.layers[2].instance_sizes, [5]);
        assert!(t.spans_superpods());
        assert_eq!(t.superpod_count(), 2);
        assert!(t.nodes_rule_out_windows(), "nodes of 2, 1 and 2 ranks");
    }

    #[test]
    fn one_node_per_superpod_skips_no_layer() {
        // Two one-node SuperPoDs: more than one node, so layer 1 exists (each SuperPoD).
        let t = Topology::new(vec![at(0, 0), at(1, 1)], 0);
        assert_eq!(t.layer_ids, [0, 1, 2]);
        assert_eq!(t.layers[1].ranks, [0]);
        assert!(t.nodes_rule_out_windows(), "one rank per node");
    }
}
