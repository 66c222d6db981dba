// The per-message network model: a price for every message the collective algorithms send, on a
// topology of nodes, so that ring, tree and hierarchical cost on one machine what the cost model
// (docs/learn/08-cost-model.md, tools/collective_model.py) says they would cost between machines.
//
//   RINGGRAD_NETWORK_MODEL="RANKS_PER_NODE,INTRA_GBPS,INTRA_US,INTER_GBPS,INTER_US"
//   e.g. "2,10,5,1,50": nodes of 2 ranks (world ranks 0-1, 2-3, ...), 10 GB/s and 5 us inside a
//   node, 1 GB/s and 50 us between nodes.
//
// Note [A price per message]: before an algorithm posts a send of b bytes to a peer, the sending
// thread (the group's communication thread) is held for latency + b / bandwidth of the link between
// the two ranks' nodes: intra-node when they share a node, inter-node otherwise. A link thus carries
// one message at a time, and a message's latency is not hidden behind another's, which is what the
// cost model assumes (α + b/β per message, summed along each rank's sends). Receives cost nothing
// extra: the peer paid for the message before sending it. The real transfer (a memory copy here)
// comes on top; with a slow enough model it is a small part.
//
// What it charges, per algorithm: the ring (dist/algorithms/ring_pipeline.cpp) each segment it sends;
// the tree (tree.cpp) each step's exchange, once whatever its eager pieces; hierarchical
// (hierarchical.cpp) its leaders' ring as the ring, and each message of its in-node binomial trees
// (ceil(log2 k) of the whole tensor on the way in, as many on the way out). The
// shared-memory paths (slots, in-place reduction buffers) send no messages, so a group built under
// the model does not use them (dist/backends/mpi_group.cpp).
//
// Unlike GroupOptions::simulated_network, which holds back a whole *operation* by one latency and
// its bytes whatever the algorithm (right for watching overlap, page 5), this model makes the
// algorithms differ as they would on a real network.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace ringgrad::dist::detail {

struct LinkCost {
  double gbps = 0;        // GB/s of bytes (1e9)
  double latency_us = 0;  // per message
  double seconds(size_t bytes) const { return latency_us * 1e-6 + static_cast<double>(bytes) / (gbps * 1e9); }
};

struct NetworkModel {
  int ranks_per_node = 1;
  LinkCost intra, inter;
};

// The model in force: RINGGRAD_NETWORK_MODEL, parsed once per process (an error names the variable
// and the expected form). Empty when unset.
const std::optional<NetworkModel>& network_model();
// "RANKS_PER_NODE,INTRA_GBPS,INTRA_US,INTER_GBPS,INTER_US" -> the model; throws with `what` named.
NetworkModel parse_network_model(const std::string& text, const char* what);

// Note [A price per message]: holds the calling thread for the price of sending `bytes` from this
// rank to rank `peer` of `comm` (nothing without a model), and counts the bytes by transport (Note
// [Bytes by transport]). Every algorithm calls it once per message it posts.
void pay_for_message(MPI_Comm comm, int peer, size_t bytes);

// Note [Bytes by transport]: every message ringgrad's own algorithms post -- the ring's, the tree's,
// the chain broadcast's, hierarchical's in-node stages -- is counted by where its receiver runs: a
// rank on this machine (MPI carries it through shared memory) or on another machine (the network),
// as MPI sees machines (World::node). Per process, every group together; dist::transport_bytes()
// reads the counters. Not counted, as no message of ours carries them: what the MPI library sends
// inside its own collectives (backend mpi; the library's collectives the other backends use), and
// shared-memory buffers that ranks on one machine reduce in place. dist::init gives the layout.
void set_machine_layout(std::vector<int> machine_of_world_rank);

}  // namespace ringgrad::dist::detail
