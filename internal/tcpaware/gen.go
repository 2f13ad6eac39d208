package tcpaware

// The BPF object and its Go bindings (tcpawarebpf_bpfel.go/.o, git-ignored) are built from
// bpf/tcpaware.c by `go generate` (make generate).
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -no-global-types -output-stem tcpawarebpf -type tcpaware_addr -type tcpaware_peer -type tcpaware_cc tcpawareBPF ../../bpf/tcpaware.c
