package kubelet

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// The parts of a ListPodResourcesResponse that attribute reads. Field
// numbers are those of k8s.io/kubelet/pkg/apis/podresources/v1/api.proto;
// the rest (CPU IDs, memory, topology, dynamic resources) is skipped, as
// is whatever a newer kubelet adds: proto3 readers ignore what they do not
// know.
type (
	podResources struct {
		name, namespace string
		containers      []containerResources
	}
	containerResources struct {
		name    string
		devices []containerDevices
	}
	containerDevices struct {
		resourceName string
		deviceIDs    []string
	}
)

// decodeList decodes a ListPodResourcesResponse. Like the generated code
// it rejects malformed wire data and strings that are not UTF-8, and
// treats a known field number with an unexpected wire type as unknown.
func decodeList(b []byte) ([]podResources, error) {
	var pods []podResources
	err := eachBytesField(b, func(num protowire.Number, v []byte) error {
		if num != 1 { // pod_resources
			return nil
		}
		pod, err := decodePod(v)
		if err != nil {
			return fmt.Errorf("pod_resources: %w", err)
		}
		pods = append(pods, pod)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("decoding ListPodResourcesResponse: %w", err)
	}
	return pods, nil
}

func decodePod(b []byte) (podResources, error) {
	var pod podResources
	err := eachBytesField(b, func(num protowire.Number, v []byte) (err error) {
		switch num {
		case 1:
			pod.name, err = utf8String("name", v)
		case 2:
			pod.namespace, err = utf8String("namespace", v)
		case 3:
			var c containerResources
			if c, err = decodeContainer(v); err != nil {
				return fmt.Errorf("containers: %w", err)
			}
			pod.containers = append(pod.containers, c)
		}
		return err
	})
	return pod, err
}

func decodeContainer(b []byte) (containerResources, error) {
	var c containerResources
	err := eachBytesField(b, func(num protowire.Number, v []byte) (err error) {
		switch num {
		case 1:
			c.name, err = utf8String("name", v)
		case 2:
			var d containerDevices
			if d, err = decodeDevices(v); err != nil {
				return fmt.Errorf("devices: %w", err)
			}
			c.devices = append(c.devices, d)
		}
		return err
	})
	return c, err
}

func decodeDevices(b []byte) (containerDevices, error) {
	var d containerDevices
	err := eachBytesField(b, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			name, err := utf8String("resource_name", v)
			d.resourceName = name
			return err
		case 2:
			id, err := utf8String("device_ids", v)
			d.deviceIDs = append(d.deviceIDs, id)
			return err
		}
		return nil
	})
	return d, err
}

// eachBytesField calls each for every length-delimited field of the
// message in b, the one wire type of the strings and messages attribute
// reads, and steps over fields of every other type.
func eachBytesField(b []byte, each func(num protowire.Number, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := each(num, v); err != nil {
			return err
		}
	}
	return nil
}

// errNotUTF8 is proto3's rule for string fields, which the generated
// code enforces too.
var errNotUTF8 = errors.New("string field contains invalid UTF-8")

func utf8String(field string, v []byte) (string, error) {
	if !utf8.Valid(v) {
		return "", fmt.Errorf("%s: %w", field, errNotUTF8)
	}
	return string(v), nil
}
