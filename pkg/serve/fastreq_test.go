package serve

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// jsonRequest is decodeRequest's encoding/json path alone.
func jsonRequest(body []byte) (InferRequest, bool) {
	var req InferRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || dec.More() {
		return InferRequest{}, false
	}
	return req, true
}

var fastRequestSeeds = []string{
	`{"id":"r1","inputs":[{"name":"x","shape":[1,1,8,8],"datatype":"FP32","data":[0.5,1,-2e-3,3]}]}`,
	` { "inputs" : [ { "data" : [[1, 2], [3, 4]] , "datatype":"INT64", "shape":[2,2], "name":"a"} ,{"name":"b","shape":[],"datatype":"BOOL","data":[true,false,null]}] , "id" : "" } `,
	`{"inputs":[]}`,
	`{}`,
	`{"inputs":[{"name":"x","shape":[-0,-3,0],"datatype":"FP32","data":[]}]}`,
	// encoding/json's alone: other spellings, escapes, other fields, null, duplicates.
	`{"ID":"r1","inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]}`,
	`{"id":"r\u00e9","inputs":[{"name":"x\n","shape":[1],"datatype":"FP32","data":[1]}]}`,
	`{"id":"é","inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]}`,
	`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1],"parameters":{"binary_data_size":4}}]}`,
	`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}],"outputs":[{"name":"0"}]}`,
	`{"id":null,"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]}`,
	`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}],"inputs":[]}`,
	`{"inputs":[{"name":"x","name":"y","shape":[1],"datatype":"FP32","data":[1]}]}`,
	// Refused by both, or by the fast path for encoding/json to word.
	`{"inputs":[{"name":"x","shape":[1.0],"datatype":"FP32","data":[1]}]}`,
	`{"inputs":[{"name":"x","shape":[01],"datatype":"FP32","data":[1]}]}`,
	`{"inputs":[{"name":"x","shape":[99999999999999999999],"datatype":"FP32","data":[1]}]}`,
	`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1,,2]}]}`,
	`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":["1"]}]}`,
	`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[{"a":1}]}]}`,
	`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":1}]}`,
	`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]} {}`,
	`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]`,
	`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]},]}`,
	`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]]]}`,
	`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[[1]}]}`,
	`{"inputs" [{"name":"x"}]}`,
	`{"other":1}`,
	`[]`,
	`"x"`,
}

// The fast path reads exactly what encoding/json reads, and takes nothing encoding/json
// refuses; decodeRequest answers alike either way.
func TestFastRequestAgreesWithJSON(t *testing.T) {
	fast := 0
	for _, body := range fastRequestSeeds {
		if checkFastRequest(t, []byte(body)) {
			fast++
		}
	}
	if fast < 5 {
		t.Errorf("the fast path read %d of the seeds, want the first 5 at least", fast)
	}
}

func FuzzFastRequest(f *testing.F) {
	for _, s := range fastRequestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkFastRequest(t, body) })
}

func checkFastRequest(t *testing.T, body []byte) bool {
	t.Helper()
	var got InferRequest
	if !fastRequest(body, &got) {
		if !reflect.DeepEqual(got, InferRequest{}) {
			t.Errorf("%s: the fast path refused it but changed the request: %+v", body, got)
		}
		return false
	}
	want, ok := jsonRequest(body)
	if !ok {
		t.Errorf("%s: the fast path read it, encoding/json refuses it", body)
		return true
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\nfast %+v\njson %+v", body, got, want)
	}
	return true
}
