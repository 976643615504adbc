# gpuwarden canary: report this interpreter and the ML frameworks it can
# import as ONE JSON object on standard output. Runs on Python 3.8+; imports
# each framework once; a framework that fails is reported, never fatal.
#
# {"python": "3.12.3",
#  "frameworks": {"torch": {"version": "2.11.0+cu130", "cuda": "13.0",
#                           "cudnn": 91002, "sees_gpu": true}, ...},
#  "errors": ["torch: sees_gpu: RuntimeError: ..."]}
#
# "cuda" and "cudnn" are null when the framework was built without them.
import json
import os
import sys


def main():
    # Frameworks and the C libraries they load print to stdout; keep the
    # real stdout for the report alone and send everything else to stderr.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    # "python -c" puts the working directory first on the path, where a
    # folder named torch would shadow the installed one.
    if sys.path and sys.path[0] == "":
        del sys.path[0]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

    errors = []
    report = {"python": "%d.%d.%d" % tuple(sys.version_info[:3]), "frameworks": {}, "errors": errors}
    for name, probe in (("torch", probe_torch), ("jax", probe_jax), ("tensorflow", probe_tensorflow)):
        fw = {}
        try:
            probe(fw, lambda key, fn, name=name, fw=fw: attempt(errors, name, fw, key, fn))
        except ImportError as e:
            if getattr(e, "name", None) == name and not fw:
                continue  # not installed
            errors.append("%s: import: %s" % (name, describe(e)))
        except BaseException as e:  # SystemExit from a broken install, too
            if isinstance(e, KeyboardInterrupt):
                raise
            errors.append("%s: import: %s" % (name, describe(e)))
        if fw:
            report["frameworks"][name] = fw
    out.write(json.dumps(report, sort_keys=True) + "\n")
    out.flush()


def describe(e):
    text = str(e).strip().splitlines()
    return type(e).__name__ + (": " + text[0] if text else "")


def attempt(errors, name, fw, key, fn):
    try:
        fw[key] = fn()
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        errors.append("%s: %s: %s" % (name, key, describe(e)))


def probe_torch(fw, put):
    import torch

    put("version", lambda: str(torch.__version__))
    put("cuda", lambda: torch.version.cuda)
    put("cudnn", lambda: torch.backends.cudnn.version())
    put("sees_gpu", lambda: bool(torch.cuda.is_available()))


def probe_jax(fw, put):
    import jax

    put("version", lambda: str(jax.__version__))
    lib = {}

    def cuda():
        # jaxlib's CUDA plugin says what it was built with; on a CPU-only
        # jaxlib this module is None.
        from jax._src.lib import cuda_versions

        lib["versions"] = cuda_versions
        return cuda_versions.cuda_runtime_build_version() if cuda_versions else None

    put("cuda", cuda)
    if "cuda" in fw:
        put("cudnn", lambda: lib["versions"].cudnn_build_version() if lib["versions"] else None)
    put("sees_gpu", lambda: any(d.platform in ("gpu", "cuda") for d in jax.devices()))


def probe_tensorflow(fw, put):
    import tensorflow as tf

    put("version", lambda: str(tf.__version__))
    build = {}

    def cuda():
        # A CPU build's build info has no cuda_version.
        build.update(tf.sysconfig.get_build_info())
        return build.get("cuda_version") or None

    put("cuda", cuda)
    if "cuda" in fw:
        put("cudnn", lambda: build.get("cudnn_version") or None)
    put("sees_gpu", lambda: len(tf.config.list_physical_devices("GPU")) > 0)


main()
