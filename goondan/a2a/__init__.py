"""Agent2Agent (A2A) protocol 1.0, JSON-RPC binding: the wire forms shared by the base ``a2a``
connector (the swarm as an A2A server) and ``Tool.spec.a2a`` (remote agents as tools);
docs/serving.md."""
