package datapath

// The BPF object and its Go bindings (ilnpbpf_bpfel.go/.o, git-ignored) are built from
// bpf/ilnp.c by `go generate` (make generate). Hand-written code lives in the other files.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -output-stem ilnpbpf -type ilnp_config -type ilnp_local_nid -type ilnp_local_locator -type ilnp_remote_locator -type ilnp_session_key -type ilnp_session -type ilnp_pair -type ilnp_remote_more -type ilnp_peer_key -type ilnp_peer -type ilnp_path_key -type ilnp_path_stats -type ilnp_multipath -type ilnp_encap6_pair ilnpBPF ../../bpf/ilnp.c
