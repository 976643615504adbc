package gpuwarden

// PodRef names a Kubernetes container that the kubelet has allocated a
// GPU (or one of its MIG devices) to, as its pod-resources API reports it:
// the labels dcgm-exporter puts on a GPU's series, so both join.
type PodRef struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
}
