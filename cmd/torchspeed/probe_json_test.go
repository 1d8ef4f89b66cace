package main

import (
	"encoding/json"
	"testing"
)

func TestEmptyLists(t *testing.T) {
	type inner struct{ L []int }
	v := struct {
		A []string
		M map[string]int
		P *inner
		N *inner
		n []int // unexported: left alone
	}{P: &inner{}}
	emptyLists(&v)
	b, err := json.Marshal(v)
	if err != nil || string(b) != `{"A":[],"M":{},"P":{"L":[]},"N":null}` || v.n != nil {
		t.Errorf("%s %v", b, err)
	}
}
