package torch_test

import "fmt"

func fmtSprint(v any) string { return fmt.Sprint(v) }
