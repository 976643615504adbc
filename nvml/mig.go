package nvml

import (
	"math"
	"strings"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuwarden/gpuwarden"
)

// migMode reports whether the device runs in MIG mode now.
func migMode(c *call, dev gonvml.Device) (on, ok bool) {
	mode, ok := get(c, "nvmlDeviceGetMigMode", func() (int, gonvml.Return) {
		current, _, ret := dev.GetMigMode()
		return current, ret
	})
	return ok && mode == gonvml.DEVICE_MIG_ENABLE, ok
}

// migDevice is one MIG device handle with what fixes it in the layout.
type migDevice struct {
	dev  gonvml.Device
	inst gpuwarden.MIGInstance
}

// migDevices enumerates the MIG devices of a GPU in MIG mode: every slot
// up to nvmlDeviceGetMaxMigDeviceCount, skipping the empty ones.
func migDevices(c *call, dev gonvml.Device) []migDevice {
	n, ok := get(c, "nvmlDeviceGetMaxMigDeviceCount", dev.GetMaxMigDeviceCount)
	if !ok {
		return nil
	}
	var out []migDevice
	for i := range n {
		c.enter("nvmlDeviceGetMigDeviceHandleByIndex")
		mdev, ret := dev.GetMigDeviceHandleByIndex(i)
		switch ret {
		case gonvml.SUCCESS:
		case gonvml.ERROR_NOT_FOUND, gonvml.ERROR_INVALID_ARGUMENT, gonvml.ERROR_NOT_SUPPORTED:
			continue // an empty slot
		default:
			c.err = c.fail("nvmlDeviceGetMigDeviceHandleByIndex", ret)
			return out
		}
		m := gpuwarden.MIGInstance{Index: i}
		m.UUID, _ = get(c, "nvmlDeviceGetUUID", mdev.GetUUID)
		m.GPUInstanceID, _ = get(c, "nvmlDeviceGetGpuInstanceId", mdev.GetGpuInstanceId)
		m.ComputeInstanceID, _ = get(c, "nvmlDeviceGetComputeInstanceId", mdev.GetComputeInstanceId)
		if name, ok := get(c, "nvmlDeviceGetName", mdev.GetName); ok {
			m.Profile = migProfile(name)
		}
		if mem, ok := get(c, "nvmlDeviceGetMemoryInfo", mdev.GetMemoryInfo); ok {
			m.MemTotalBytes = mem.Total
		}
		if c.err != nil {
			return out
		}
		out = append(out, migDevice{dev: mdev, inst: m})
	}
	return out
}

// migProfile takes the profile out of a MIG device's name: NVML names it
// "NVIDIA H100 80GB HBM3 MIG 3g.40gb"; a name without "MIG " is kept whole.
func migProfile(name string) string {
	if i := strings.LastIndex(name, "MIG "); i >= 0 {
		return strings.TrimSpace(name[i+len("MIG "):])
	}
	return name
}

// migSamples reads each instance's memory and processes. Utilization is
// GPM's (nvmlGpmMigSampleGet, Hopper and later) and needs two samples;
// without GPM it is unknown.
func (g *GPUs) migSamples(c *call, index int, dev gonvml.Device) []gpuwarden.MIGSample {
	devs := migDevices(c, dev)
	out := make([]gpuwarden.MIGSample, 0, len(devs))
	gpm := g.gpmSupported(c, index, dev)
	for _, d := range devs {
		s := gpuwarden.MIGSample{MIGInstance: d.inst}
		if mem, ok := get(c, "nvmlDeviceGetMemoryInfo", d.dev.GetMemoryInfo); ok {
			s.MemUsedBytes = mem.Used
		} else {
			s.SetUnknown(gpuwarden.FieldMemUsed, c.why)
		}
		if procs, ok := get(c, "nvmlDeviceGetComputeRunningProcesses", d.dev.GetComputeRunningProcesses); ok {
			s.Processes = processes(procs)
		} else {
			s.SetUnknown(gpuwarden.FieldProcesses, c.why)
		}
		if gpm {
			util, why := g.gpmUtil(c, index, dev, d.inst.GPUInstanceID)
			if why != "" {
				s.SetUnknown(gpuwarden.FieldUtil, why)
			} else {
				s.UtilPercent = util
			}
		} else {
			s.SetUnknown(gpuwarden.FieldUtil, gpuwarden.UnknownNotSupported)
		}
		out = append(out, s)
	}
	return out
}

// processes turns NVML's list into ours; the names come later, from /proc.
func processes(procs []gonvml.ProcessInfo) []gpuwarden.GPUProcess {
	var out []gpuwarden.GPUProcess
	for _, p := range procs {
		used := p.UsedGpuMemory
		if used == math.MaxUint64 { // NVML_VALUE_NOT_AVAILABLE, e.g. without permission
			used = 0
		}
		out = append(out, gpuwarden.GPUProcess{PID: int(p.Pid), UsedBytes: used})
	}
	return out
}

// gpmKey names one GPU instance's GPM sample.
type gpmKey struct{ gpu, gi int }

// gpmSupported asks once per GPU whether it has GPM.
func (g *GPUs) gpmSupported(c *call, index int, dev gonvml.Device) bool {
	g.mu.Lock()
	v, asked := g.gpmSupport[index]
	g.mu.Unlock()
	if asked {
		return v
	}
	sup, ok := try(c, "nvmlGpmQueryDeviceSupport", dev.GpmQueryDeviceSupport)
	v = ok && sup.IsSupportedDevice != 0
	c.why = ""
	g.mu.Lock()
	g.gpmSupport[index] = v
	g.mu.Unlock()
	return v
}

// gpmUtil takes a GPM sample of one GPU instance and returns the SM
// utilization since the previous one; the first sample only starts the
// interval. why is the Unknown reason when there is no value.
func (g *GPUs) gpmUtil(c *call, index int, dev gonvml.Device, gi int) (float64, string) {
	key := gpmKey{index, gi}
	cur, ok := try(c, "nvmlGpmSampleAlloc", g.lib.GpmSampleAlloc)
	if !ok {
		return 0, c.why
	}
	if _, ok := try(c, "nvmlGpmMigSampleGet", func() (struct{}, gonvml.Return) {
		return struct{}{}, dev.GpmMigSampleGet(gi, cur)
	}); !ok {
		why := c.why
		_ = cur.Free()
		return 0, why
	}
	g.mu.Lock()
	prev, had := g.gpm[key]
	g.gpm[key] = cur
	g.mu.Unlock()
	if !had {
		return 0, gpuwarden.UnknownPending
	}
	defer prev.Free()
	mg := gonvml.GpmMetricsGetType{NumMetrics: 1, Sample1: prev, Sample2: cur}
	mg.Metrics[0].MetricId = uint32(gonvml.GPM_METRIC_SM_UTIL)
	if _, ok := try(c, "nvmlGpmMetricsGet", func() (struct{}, gonvml.Return) {
		return struct{}{}, g.lib.GpmMetricsGet(&mg)
	}); !ok {
		return 0, c.why
	}
	if gonvml.Return(mg.Metrics[0].NvmlReturn) != gonvml.SUCCESS {
		return 0, gpuwarden.UnknownNotSupported
	}
	return mg.Metrics[0].Value, ""
}

// freeGPM releases the kept GPM samples.
func (g *GPUs) freeGPM() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, s := range g.gpm {
		_ = s.Free()
		delete(g.gpm, k)
	}
}
