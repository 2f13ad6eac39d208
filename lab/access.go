package lab

import (
	"cmp"
	"fmt"

	"ilnp/lab/linkemu"
)

// cmpOr is cmp.Or for shapes (topology.go).
func cmpOr(a, b string) string { return cmp.Or(a, b) }

// accessShapes are the shapes of the MN's links to R2 and R3 (--access-r2, --access-r3,
// each defaulting to --access, which defaults to wlan).
func (c *RunConfig) accessShapes() (r2, r3 string) {
	base := cmp.Or(c.Access, "wlan")
	return cmp.Or(c.AccessR2, base), cmp.Or(c.AccessR3, base)
}

// accessText is the report's description of the access links.
func (c *RunConfig) accessText() string {
	r2, r3 := c.accessShapes()
	if r2 == r3 {
		return r2
	}
	return fmt.Sprintf("%s to R2 (L2), %s to R3 (L3)", r2, r3)
}

// validAccess checks the per-link shapes before anything is built.
func (c *RunConfig) validAccess() error {
	r2, r3 := c.accessShapes()
	for _, s := range []struct{ flag, shape string }{{"--access-r2", r2}, {"--access-r3", r3}} {
		if _, err := linkemu.ParseShape(s.shape); err != nil {
			return fmt.Errorf("%s: %w", s.flag, err)
		}
	}
	return nil
}
