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
mod tests;
