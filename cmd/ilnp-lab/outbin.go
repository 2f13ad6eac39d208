package main

import (
	"flag"
	"fmt"
)

// registerOutBin registers --out and --bin, which every subcommand running ilnpd in the lab has.
func (c *common) registerOutBin(fs *flag.FlagSet) {
	fs.StringVar(&c.bin, "bin", "", "directory with ilnpd and ilnpctl (default: build them into OUT/bin)")
	fs.StringVar(&c.out, "out", "", "output directory")
}

// ilnpBinaries checks --out and returns the directory with ilnpd and ilnpctl, building them
// there when --bin was not given.
func (c *common) ilnpBinaries(cmd string) (string, error) {
	if c.out == "" {
		return "", fmt.Errorf("%s: --out DIR is required", cmd)
	}
	return c.binaries([]string{"ilnp-soft"})
}
