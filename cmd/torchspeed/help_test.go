package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// maxHelpWidth is the widest line --help may print: wider lines wrap mid-word on a
// 100-column terminal and hide where one flag's text ends.
const maxHelpWidth = helpWidth

// TestHelpReadable renders every command's --help and checks that no line is wider than
// maxHelpWidth and that no flag shows a type name pflag took from backquoted text in its
// usage string (it printed "--instances torchspeed bench --instances").
func TestHelpReadable(t *testing.T) {
	root := newRootCmd()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := c.CommandPath()
		check := func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "`") {
				name, _ := pflag.UnquoteUsage(f)
				t.Errorf("%s --%s: backquotes in its usage make pflag show %q as its type", path, f.Name, name)
			}
		}
		c.LocalFlags().VisitAll(check)
		c.InheritedFlags().VisitAll(check)
		var buf bytes.Buffer
		c.SetOut(&buf)
		if err := c.Help(); err != nil {
			t.Errorf("%s --help: %v", path, err)
		}
		for _, line := range strings.Split(buf.String(), "\n") {
			if n := len([]rune(line)); n > maxHelpWidth {
				t.Errorf("%s --help: line of %d columns (at most %d):\n%s", path, n, maxHelpWidth, line)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
