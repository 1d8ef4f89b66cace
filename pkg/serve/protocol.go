package serve

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/torchspeed/torchspeed/bindings/torch"
)

// The Open Inference Protocol's (KServe v2) JSON messages, as Triton and KServe runtimes speak
// them: clients and load generators written for those servers send these unchanged.

// InferRequest is the body of POST /v2/models/{name}/infer.
type InferRequest struct {
	ID         string                     `json:"id,omitempty"`
	Parameters map[string]json.RawMessage `json:"parameters,omitempty"`
	Inputs     []RequestInput             `json:"inputs"`
	Outputs    []RequestOutput            `json:"outputs,omitempty"`
}

// RequestInput is one input tensor: data holds its elements flat or nested, row-major.
type RequestInput struct {
	Name       string                     `json:"name"`
	Shape      []int64                    `json:"shape"`
	Datatype   string                     `json:"datatype"`
	Parameters map[string]json.RawMessage `json:"parameters,omitempty"`
	Data       json.RawMessage            `json:"data"`
}

// RequestOutput names an output the client wants; none named means all of them.
type RequestOutput struct {
	Name       string                     `json:"name"`
	Parameters map[string]json.RawMessage `json:"parameters,omitempty"`
}

// InferResponse is the answer to an inference request.
type InferResponse struct {
	ModelName    string           `json:"model_name"`
	ModelVersion string           `json:"model_version,omitempty"`
	ID           string           `json:"id,omitempty"`
	Outputs      []ResponseOutput `json:"outputs"`
}

// ResponseOutput is one output tensor, its data flat and row-major: in Data, or, with the binary
// tensor data extension, after the JSON (Parameters["binary_data_size"] bytes).
type ResponseOutput struct {
	Name       string         `json:"name"`
	Shape      []int64        `json:"shape"`
	Datatype   string         `json:"datatype"`
	Parameters map[string]any `json:"parameters,omitempty"`
	Data       any            `json:"data,omitempty"`
}

// TensorMetadata describes an input or output in the model metadata; -1 marks a dimension of
// any size (the batch dimension).
type TensorMetadata struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

// ModelMetadata is the answer to GET /v2/models/{name}.
type ModelMetadata struct {
	Name     string           `json:"name"`
	Versions []string         `json:"versions"`
	Platform string           `json:"platform"`
	Inputs   []TensorMetadata `json:"inputs"`
	Outputs  []TensorMetadata `json:"outputs"`
}

// ServerMetadata is the answer to GET /v2.
type ServerMetadata struct {
	Name       string   `json:"name"`
	Version    string   `json:"version"`
	Extensions []string `json:"extensions"`
}

// The protocol's datatype names for the torch dtypes a request can carry.
var protocolTypes = map[torch.DType]string{
	torch.Bool: "BOOL", torch.Uint8: "UINT8", torch.Int8: "INT8", torch.Int16: "INT16",
	torch.Int32: "INT32", torch.Int64: "INT64", torch.Float16: "FP16", torch.BFloat16: "BF16",
	torch.Float32: "FP32", torch.Float64: "FP64",
}

const supportedTypes = "BOOL, UINT8, INT8, INT16, INT32, INT64, FP32 or FP64"

// dtypeOf maps a protocol datatype to the torch dtype it is built as.
func dtypeOf(datatype string) (torch.DType, error) {
	for dt, name := range protocolTypes {
		if name == datatype {
			switch dt {
			case torch.Float16, torch.BFloat16:
				return 0, fmt.Errorf("datatype %s is not accepted: send %s (the model converts)", datatype, supportedTypes)
			}
			return dt, nil
		}
	}
	if datatype == "BYTES" {
		return 0, fmt.Errorf("datatype BYTES (strings) is not accepted: this server runs tensor models; send %s", supportedTypes)
	}
	return 0, fmt.Errorf("unknown datatype %q: use %s", datatype, supportedTypes)
}

// protocolType names a manifest dtype ("float32") in the protocol's terms ("FP32").
func protocolType(manifestDType string) string {
	if manifestDType == "" {
		return "FP32"
	}
	dt, err := torch.ParseDType(manifestDType)
	if err != nil {
		return strings.ToUpper(manifestDType)
	}
	return protocolTypes[dt]
}

// maxNesting bounds how deep nested data may go, so that a hostile body cannot recurse without
// limit; real tensors have a handful of dimensions.
const maxNesting = 32

// numel is the element count of shape, refusing negative dimensions and counts that could not
// be allocated.
func numel(shape []int64) (int64, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("shape %v has a negative dimension: dimensions are 0 or more", shape)
		}
		if d != 0 && n > math.MaxInt32/d {
			return 0, fmt.Errorf("shape %v holds 2^31 elements or more: send smaller tensors", shape)
		}
		n *= d
	}
	return n, nil
}

// decodeJSON reads the n elements of datatype dt a REST input holds into a []T, from its JSON
// data or from bin (the binary tensor data extension), checking the count before anything
// reaches libtorch.
func decodeJSON(in RequestInput, bin []byte, dt torch.DType, n int64) (any, error) {
	if bin != nil {
		if len(in.Data) > 0 {
			return nil, errors.New(`both "data" and binary_data_size: send the elements one way`)
		}
		return fromBinary(dt, bin, n)
	}
	if len(in.Data) == 0 {
		return nil, errors.New(`no "data": give the elements as a flat or nested JSON list`)
	}
	var data any
	var got int
	switch dt {
	case torch.Float32:
		d, err := decodeData[float32](in.Data, 0)
		data, got, err = d, len(d), typeErr(err, in.Datatype, "numbers")
		if err != nil {
			return nil, err
		}
	case torch.Float64:
		d, err := decodeData[float64](in.Data, 0)
		data, got, err = d, len(d), typeErr(err, in.Datatype, "numbers")
		if err != nil {
			return nil, err
		}
	case torch.Int64:
		d, err := decodeData[int64](in.Data, 0)
		data, got, err = d, len(d), typeErr(err, in.Datatype, "integers")
		if err != nil {
			return nil, err
		}
	case torch.Int32:
		d, err := decodeData[int32](in.Data, 0)
		data, got, err = d, len(d), typeErr(err, in.Datatype, "integers from -2^31 to 2^31-1")
		if err != nil {
			return nil, err
		}
	case torch.Int16:
		d, err := decodeData[int16](in.Data, 0)
		data, got, err = d, len(d), typeErr(err, in.Datatype, "integers from -32768 to 32767")
		if err != nil {
			return nil, err
		}
	case torch.Int8:
		d, err := decodeData[int8](in.Data, 0)
		data, got, err = d, len(d), typeErr(err, in.Datatype, "integers from -128 to 127")
		if err != nil {
			return nil, err
		}
	case torch.Uint8:
		d, err := decodeData[uint8](in.Data, 0)
		data, got, err = d, len(d), typeErr(err, in.Datatype, "integers from 0 to 255")
		if err != nil {
			return nil, err
		}
	case torch.Bool:
		d, err := decodeData[bool](in.Data, 0)
		data, got, err = d, len(d), typeErr(err, in.Datatype, "true or false")
		if err != nil {
			return nil, err
		}
	}
	if int64(got) != n {
		return nil, fmt.Errorf("data has %d elements, shape %v holds %d: send exactly one value per element", got, in.Shape, n)
	}
	return data, nil
}

// tensorData is an input's elements (a []T) and shape, decoded but not yet a tensor, so that
// dynamic batching can join requests first.
type tensorData struct {
	data  any
	shape []int64
}

// concatData joins []T slices of one type end to end.
func concatData(parts []any) any {
	switch parts[0].(type) {
	case []float32:
		return concat[float32](parts)
	case []float64:
		return concat[float64](parts)
	case []int64:
		return concat[int64](parts)
	case []int32:
		return concat[int32](parts)
	case []int16:
		return concat[int16](parts)
	case []int8:
		return concat[int8](parts)
	case []uint8:
		return concat[uint8](parts)
	case []bool:
		return concat[bool](parts)
	}
	return nil
}

func concat[T any](parts []any) []T {
	n := 0
	for _, p := range parts {
		n += len(p.([]T))
	}
	out := make([]T, 0, n)
	for _, p := range parts {
		out = append(out, p.([]T)...)
	}
	return out
}

// sliceData is d[lo:hi] for any []T, and the length of d.
func sliceData(d any, lo, hi int) any {
	switch d := d.(type) {
	case []float32:
		return d[lo:hi]
	case []float64:
		return d[lo:hi]
	case []int64:
		return d[lo:hi]
	case []int32:
		return d[lo:hi]
	case []int16:
		return d[lo:hi]
	case []int8:
		return d[lo:hi]
	case []uint8:
		return d[lo:hi]
	case []bool:
		return d[lo:hi]
	}
	return nil
}

func dataLen(d any) int {
	switch d := d.(type) {
	case []float32:
		return len(d)
	case []float64:
		return len(d)
	case []int64:
		return len(d)
	case []int32:
		return len(d)
	case []int16:
		return len(d)
	case []int8:
		return len(d)
	case []uint8:
		return len(d)
	case []bool:
		return len(d)
	}
	return 0
}

func typeErr(err error, datatype, want string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("data is not a list of %s: %s (datatype %s)", want, clip(err.Error()), datatype)
}

// decodeData reads a flat list of T, or a nested one (as the protocol allows), row-major.
func decodeData[T any](raw json.RawMessage, depth int) ([]T, error) {
	if flat, ok := fastFlat[T](raw); ok {
		return flat, nil
	}
	var flat []T
	ferr := json.Unmarshal(raw, &flat)
	if ferr == nil {
		return flat, nil
	}
	if depth >= maxNesting {
		return nil, fmt.Errorf("nested more than %d levels deep", maxNesting)
	}
	var nested []json.RawMessage
	if err := json.Unmarshal(raw, &nested); err != nil || len(nested) == 0 || !isList(nested[0]) {
		return nil, ferr
	}
	var out []T
	for _, sub := range nested {
		if !isList(sub) {
			return nil, fmt.Errorf("mixes lists and values at one level: nest every element to the same depth")
		}
		d, err := decodeData[T](sub, depth+1)
		if err != nil {
			return nil, err
		}
		out = append(out, d...)
	}
	return out, nil
}

// fastFlat parses a flat list of numbers without encoding/json's reflection and its second
// pass over the bytes: decoding was a third of serve's own time per request on a small model.
// Anything else (nesting, strings, booleans, out-of-range values) reports !ok, and the caller
// takes encoding/json's path, which words the errors.
func fastFlat[T any](raw []byte) ([]T, bool) {
	switch any(*new(T)).(type) {
	case float32, float64, int64, int32:
	default:
		return nil, false
	}
	i, n := 0, len(raw)
	skip := func() {
		for i < n && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
			i++
		}
	}
	skip()
	if i >= n || raw[i] != '[' {
		return nil, false
	}
	i++
	out := make([]T, 0, bytes.Count(raw, []byte{','})+1)
	skip()
	if i < n && raw[i] == ']' {
		i++
		skip()
		return out, i == n
	}
	for {
		start := i
		for i < n && (raw[i] == '-' || raw[i] == '+' || raw[i] == '.' || raw[i] == 'e' || raw[i] == 'E' || (raw[i] >= '0' && raw[i] <= '9')) {
			i++
		}
		if start == i || !validJSONNumber(raw[start:i]) {
			return nil, false
		}
		v, ok := parseNumber[T](raw[start:i])
		if !ok {
			return nil, false
		}
		out = append(out, v)
		skip()
		if i >= n {
			return nil, false
		}
		if raw[i] == ']' {
			i++
			skip()
			return out, i == n
		}
		if raw[i] != ',' {
			return nil, false
		}
		i++
		skip()
	}
}

// parseNumber reads one element for fastFlat. Calling strconv directly, rather than through a
// function value, keeps the string conversion off the heap: one allocation per element was
// most of a request's.
func parseNumber[T any](b []byte) (T, bool) {
	var v any
	var err error
	switch any(*new(T)).(type) {
	case float32:
		var f float64
		f, err = strconv.ParseFloat(string(b), 32)
		v = float32(f)
	case float64:
		v, err = strconv.ParseFloat(string(b), 64)
	case int64:
		v, err = strconv.ParseInt(string(b), 10, 64)
	default:
		var i int64
		i, err = strconv.ParseInt(string(b), 10, 32)
		v = int32(i)
	}
	return v.(T), err == nil
}

// validJSONNumber refuses what strconv takes but JSON does not ("+1", ".5", "1.", "01").
func validJSONNumber(b []byte) bool {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	if i >= len(b) || b[i] < '0' || b[i] > '9' {
		return false
	}
	if b[i] == '0' && i+1 < len(b) && b[i+1] >= '0' && b[i+1] <= '9' {
		return false
	}
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return false
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return false
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	return i == len(b)
}

func isList(raw json.RawMessage) bool {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '[':
			return true
		}
		return false
	}
	return false
}

// outputOf reads an output tensor for the response. Quantized and half-precision outputs go out
// as FP32, the closest type a client can read.
func outputOf(o torch.Output) (ResponseOutput, error) {
	t := o.Tensor
	r := ResponseOutput{Name: o.Name, Shape: t.Shape()}
	dt := t.DType()
	name, ok := protocolTypes[dt]
	if !ok || dt == torch.Float16 || dt == torch.BFloat16 {
		f, err := t.Float32s()
		if err != nil {
			return r, fmt.Errorf("output %s (%s): %w", o.Name, dt, err)
		}
		r.Datatype, r.Data = "FP32", f
		return r, nil
	}
	d, err := torch.DataAny(t)
	if err != nil {
		return r, fmt.Errorf("output %s (%s): %w", o.Name, dt, err)
	}
	r.Datatype, r.Data = name, d
	return r, nil
}

// jsonData is data as encoding/json must see it to write a list of numbers.
func jsonData(d any) any {
	if b, ok := d.([]uint8); ok {
		// encoding/json writes []byte as base64; the protocol wants numbers.
		ints := make([]uint16, len(b))
		for i, v := range b {
			ints[i] = uint16(v)
		}
		return ints
	}
	return d
}

// Binary tensor data: little-endian, row-major, no padding; BOOL one byte, 0 or 1.

// fromBinary reads n elements of dt from b, which must hold exactly n of them.
func fromBinary(dt torch.DType, b []byte, n int64) (any, error) {
	if want := n * int64(dt.Size()); int64(len(b)) != want {
		return nil, fmt.Errorf("binary_data_size is %d bytes, shape and datatype need %d (%d elements of %d bytes)", len(b), want, n, dt.Size())
	}
	le := binary.LittleEndian
	switch dt {
	case torch.Float32:
		out := make([]float32, n)
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(b[4*i:]))
		}
		return out, nil
	case torch.Float64:
		out := make([]float64, n)
		for i := range out {
			out[i] = math.Float64frombits(le.Uint64(b[8*i:]))
		}
		return out, nil
	case torch.Int64:
		out := make([]int64, n)
		for i := range out {
			out[i] = int64(le.Uint64(b[8*i:]))
		}
		return out, nil
	case torch.Int32:
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(le.Uint32(b[4*i:]))
		}
		return out, nil
	case torch.Int16:
		out := make([]int16, n)
		for i := range out {
			out[i] = int16(le.Uint16(b[2*i:]))
		}
		return out, nil
	case torch.Int8:
		out := make([]int8, n)
		for i := range out {
			out[i] = int8(b[i])
		}
		return out, nil
	case torch.Uint8:
		return bytes.Clone(b), nil
	case torch.Bool:
		out := make([]bool, n)
		for i, v := range b {
			if v > 1 {
				return nil, fmt.Errorf("BOOL element %d is byte %d: send 0 or 1", i, v)
			}
			out[i] = v == 1
		}
		return out, nil
	}
	return nil, fmt.Errorf("datatype %s cannot be sent as binary data here: use %s", dt, supportedTypes)
}

// appendBinary appends d (a []T from outputOf) to b in the extension's layout.
func appendBinary(b []byte, d any) []byte {
	le := binary.LittleEndian
	switch d := d.(type) {
	case []float32:
		for _, v := range d {
			b = le.AppendUint32(b, math.Float32bits(v))
		}
	case []float64:
		for _, v := range d {
			b = le.AppendUint64(b, math.Float64bits(v))
		}
	case []int64:
		for _, v := range d {
			b = le.AppendUint64(b, uint64(v))
		}
	case []int32:
		for _, v := range d {
			b = le.AppendUint32(b, uint32(v))
		}
	case []int16:
		for _, v := range d {
			b = le.AppendUint16(b, uint16(v))
		}
	case []int8:
		for _, v := range d {
			b = append(b, byte(v))
		}
	case []uint8:
		b = append(b, d...)
	case []bool:
		for _, v := range d {
			if v {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
		}
	}
	return b
}

// clip keeps error text from a request short enough to echo back and log.
func clip(s string) string {
	const max = 300
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
