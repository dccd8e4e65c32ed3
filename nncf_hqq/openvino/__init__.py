"""HQQ's OpenVINO backend: graph facts, the f16 zero-point decompression subgraph and the writer."""
