package node

// formation returns this node's formation id ("" if none yet).
func (n *Node) formation() string { return n.fleet.Formation() }

// gossipName is this member's gossip name.
func (n *Node) gossipName() string { return n.fleet.GossipName() }
