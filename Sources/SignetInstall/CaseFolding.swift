import Foundation
internal import CSignetSystem
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore

/// Paths on filesystems that ignore case (FORMAT.md §2: `--case-insensitive-dest`).
public enum CaseFolding {
    /// The form two names share when a case-insensitive filesystem takes them for one:
    /// Unicode NFC, then case folding.
    static func key(_ path: String) -> String {
        path.precomposedStringWithCanonicalMapping.folding(options: [.caseInsensitive], locale: nil)
    }

    /// Refuses (`.malformedArchive`, exit 4) resource paths that one case-insensitive filesystem
    /// would make one: two files ("A.txt", "a.txt"), or a file and a folder ("Docs", "docs/x").
    /// Folders that differ only in case ("Img/a", "img/b") merge without loss and are allowed.
    static func refuseCollisions(_ paths: [String], package: String) throws {
        var files: [String: String] = [:]
        for path in paths {
            if let other = files.updateValue(path, forKey: key(path)) {
                throw SignetError(
                    .malformedArchive,
                    "'\(other)' and '\(path)' in '\(package)' would be the same file on a case-insensitive filesystem; nothing was installed (rename one in the package)",
                    path: package, entry: path)
            }
        }
        for path in paths {
            var prefix = ""
            for component in path.split(separator: "/").dropLast() {
                prefix += (prefix.isEmpty ? "" : "/") + component
                if let file = files[key(prefix)] {
                    throw SignetError(
                        .malformedArchive,
                        "'\(file)' is a file and '\(prefix)' a folder (of '\(path)') in '\(package)', the same name on a case-insensitive filesystem; nothing was installed",
                        path: package, entry: path)
                }
            }
        }
    }

    /// Filesystem types (`statfs` f_type) that compare names without case: vfat/msdos, exFAT,
    /// NTFS (ntfs3 and ntfs-3g's fuseblk cannot be told apart from other FUSE filesystems, so
    /// only the kernel's), and SMB/CIFS shares.
    public static func ignoresCase(filesystemType: Int64) -> Bool {
        [0x4d44, 0x2011_BAB0, 0x5346_544E, 0x7366_746E, 0xFF53_4D42, 0xFE53_4D42].contains(filesystemType)
    }

    /// Whether the filesystem holding `directory` ignores case (false when it cannot be told).
    static func ignoresCase(at directory: String) -> Bool {
        let type = signet_filesystem_type(directory)
        return type >= 0 && ignoresCase(filesystemType: Int64(type))
    }
}
