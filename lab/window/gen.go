package window

// The BPF object and its Go binding (windowbpf_bpfel.go/.o, git-ignored) are built from
// bpf/window.c by `go generate` (make generate).
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -no-global-types -output-stem windowbpf windowBPF bpf/window.c
