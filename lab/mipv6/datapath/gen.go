package datapath

// The BPF object and its Go bindings (mip6bpf_bpfel.go/.o, git-ignored) are built from
// bpf/mip6.c by `go generate` (make generate). Hand-written code lives in the other files.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -output-stem mip6bpf -type mip6_config -type mip6_binding -type mip6_addr mip6BPF bpf/mip6.c
