package cc

// The BPF objects and their Go bindings (hyblabpf_bpfel.go/.o, venobpf_bpfel.go/.o,
// git-ignored) are built from bpf/*.c by `go generate` (make generate).
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -no-global-types -output-stem hyblabpf -type cc_step hyblaBPF bpf/hybla.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -no-global-types -output-stem venobpf veno bpf/veno.c
