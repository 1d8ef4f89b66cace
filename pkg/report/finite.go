package report

import (
	"math"
	"reflect"
	"strconv"
	"strings"
)

// markNonFinite replaces every NaN or infinite figure with null (a nil *float64; 0 for the few
// plain float64 fields, which only a broken clock could make non-finite) and records its JSON
// path in r.NonFinite, because encoding/json refuses them ("json: unsupported value: +Inf")
// and a model whose outputs are NaN must still get its report.
func (r *Report) markNonFinite() {
	seen := map[string]bool{}
	for _, p := range r.NonFinite {
		seen[p] = true
	}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			r.NonFinite = append(r.NonFinite, p)
		}
	}
	walkFloats(reflect.ValueOf(r).Elem(), "", add)
}

func nonFinite(f float64) bool { return math.IsNaN(f) || math.IsInf(f, 0) }

func walkFloats(v reflect.Value, path string, add func(string)) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return
		}
		if v.Elem().Kind() == reflect.Float64 {
			if nonFinite(v.Elem().Float()) && v.CanSet() {
				v.Set(reflect.Zero(v.Type()))
				add(path)
			}
			return
		}
		walkFloats(v.Elem(), path, add)
	case reflect.Float64:
		if nonFinite(v.Float()) && v.CanSet() {
			v.SetFloat(0)
			add(path)
		}
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name := strings.Split(f.Tag.Get("json"), ",")[0]
			if name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			walkFloats(v.Field(i), join(path, name), add)
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			walkFloats(v.Index(i), path+"["+strconv.Itoa(i)+"]", add)
		}
	case reflect.Map:
		if v.Type().Elem().Kind() != reflect.Float64 {
			return
		}
		for _, k := range v.MapKeys() {
			if f := v.MapIndex(k).Float(); nonFinite(f) {
				v.SetMapIndex(k, reflect.ValueOf(0.0).Convert(v.Type().Elem()))
				add(join(path, k.String()))
			}
		}
	}
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
