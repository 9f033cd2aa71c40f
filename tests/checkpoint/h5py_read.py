"""Reads every dataset of a dgrr checkpoint with h5py (Debian's python3-h5py).

usage: /usr/bin/python3 h5py_read.py CHECKPOINT [DUMP_DIR]

The zstd filter (HDF5 filter 32015) is not built into libhdf5: h5py decodes
the compressed datasets only through dgrr's plugin, found through
HDF5_PLUGIN_PATH. Prints one line per dataset, "PATH FILTERS NBYTES", and,
given DUMP_DIR, writes each dataset's bytes to DUMP_DIR/<PATH with '/' as
'%'>.bin so the caller can compare them with what it wrote.

Exit status: 0 every dataset read and at least one is zstd-compressed;
2 a dataset could not be read (the filter not found, most likely);
3 h5py cannot be imported; 4 no zstd-compressed dataset in the file.
"""
import os
import sys

ZSTD_FILTER_ID = 32015


def main():
    if len(sys.argv) not in (2, 3):
        sys.stderr.write(__doc__)
        return 1
    try:
        import h5py
    except ImportError as e:
        sys.stderr.write(
            "h5py_read: cannot import h5py into %s (%s): install Debian's python3-h5py "
            "(scripts/install-deps.sh does)\n" % (sys.executable, e))
        return 3
    path = sys.argv[1]
    dump_dir = sys.argv[2] if len(sys.argv) == 3 else None
    datasets = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: datasets.append(name)
                     if isinstance(obj, h5py.Dataset) else None)
        compressed = 0
        for name in sorted(datasets):
            ds = f[name]
            plist = ds.id.get_create_plist()
            filters = [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
            try:
                data = ds[()]
            except Exception as e:  # h5py raises OSError; any failure counts
                sys.stderr.write("h5py_read: cannot read /%s (filters %s, HDF5_PLUGIN_PATH=%s): %s\n"
                                 % (name, filters, os.environ.get("HDF5_PLUGIN_PATH", ""), e))
                return 2
            raw = data.tobytes() if hasattr(data, "tobytes") else bytes(data)
            compressed += ZSTD_FILTER_ID in filters
            print("/%s %s %d" % (name, ",".join(str(x) for x in filters) or "-", len(raw)))
            if dump_dir:
                with open(os.path.join(dump_dir, name.replace("/", "%") + ".bin"), "wb") as out:
                    out.write(raw)
    if compressed == 0:
        sys.stderr.write("h5py_read: no dataset in %s uses the zstd filter %d\n"
                         % (path, ZSTD_FILTER_ID))
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main())
