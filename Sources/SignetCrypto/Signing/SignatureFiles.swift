public import SystemPackage
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore

/// Detached signature files: the raw signature bytes and nothing else (FORMAT.md §1).
public enum SignatureFiles {
    /// Reads a signature file. Its length is judged by the verifier, not here.
    public static func read(_ path: String) throws -> [UInt8] {
        try readSmallFile(path, what: "signature file", limit: 1 << 20)
    }

    /// Writes each signature to the path at the same index, all or nothing.
    ///
    /// Refused before anything is written (exit 2): a target that is one of `inputs` (the signed
    /// files, the key: compared by device and inode, so `./key.pem`, hard and symbolic links are
    /// caught too) or that two signatures would share. Every signature is then written and
    /// flushed to a temporary file beside its target; only when all of them are on disk are
    /// they renamed into place, and if one rename fails the ones already renamed are undone
    /// (older signatures restored), so a failure leaves every target as it was.
    ///
    /// With `replace` false, an existing signature file is refused before anything is written
    /// (``/SignetCore/SignetError/Code/fileExists``), and one that appears meanwhile is not replaced either.
    public static func write(_ signatures: [Signature], to paths: [String], protecting inputs: [String] = [], replace: Bool = true) throws {
        guard signatures.count == paths.count else {
            throw SignetError(.usage, "one path per signature: \(signatures.count) signatures, \(paths.count) paths")
        }
        try FileIdentity.refuseOverwriting(targets: paths, inputs: inputs.map { ($0, "input") }, what: "the signature file")
        if !replace { try paths.forEach { try AtomicFile.refuseExisting($0, what: "the signature file") } }
        for path in paths {
            var info = stat()
            if lstat(path, &info) == 0, info.st_mode & S_IFMT != S_IFREG, info.st_mode & S_IFMT != S_IFLNK {
                throw SignetError(
                    .fileExists,
                    "cannot write the signature '\(path)': a \(info.st_mode & S_IFMT == S_IFDIR ? "directory" : "non-regular file") is in the way; move it or choose another path with --out; no signature was written",
                    path: path)
            }
        }
        var staged: [(temporary: String, target: String)] = []
        var tokens: [Int] = []
        defer {
            for entry in staged {
                unlink(entry.temporary)
                unlink(entry.temporary + ".old")
            }
            tokens.forEach(TemporaryFiles.unregister)
        }
        for (signature, path) in zip(signatures, paths) {
            let temporary = AtomicFile.temporaryPath(beside: path, tag: "staged-\(staged.count)")
            tokens.append(TemporaryFiles.register(temporary))
            tokens.append(TemporaryFiles.register(temporary + ".old"))
            staged.append((temporary, path))
            // Written and flushed once, straight into its staged name (renamed into place below).
            try AtomicFile.writeNew(signature.bytes, at: temporary, mode: 0o644, for: path)
        }
        // Commit: keep a hard link to each older signature until every rename has succeeded.
        var committed: [(target: String, backup: String?)] = []
        func rollBack() {
            for entry in committed.reversed() {
                if let backup = entry.backup { rename(backup, entry.target) } else { unlink(entry.target) }
            }
        }
        try TemporaryFiles.guarded { try commit(staged, replace: replace, &committed, rollBack) }
        for entry in committed { if let backup = entry.backup { unlink(backup) } }
        AtomicFile.syncDirectories(of: paths)
    }

    private static func commit(
        _ staged: [(temporary: String, target: String)], replace: Bool, _ committed: inout [(target: String, backup: String?)], _ rollBack: () -> Void
    ) throws {
        for entry in staged {
            if !replace {
                do { try AtomicFile.renameNoReplace(entry.temporary, entry.target, what: "the signature file") } catch {
                    rollBack()
                    throw error
                }
                committed.append((entry.target, nil))
                continue
            }
            var backup: String? = entry.temporary + ".old"
            if link(entry.target, backup!) != 0 {
                let err = errno
                guard err == ENOENT else {
                    rollBack()
                    throw SignetError.posix(err, "cannot keep the older signature while replacing", path: entry.target, call: "link")
                }
                backup = nil
            }
            guard rename(entry.temporary, entry.target) == 0 else {
                let err = errno
                if let backup { unlink(backup) }
                rollBack()
                throw SignetError.posix(err, "cannot write the signature (no signature was changed)", path: entry.target, call: "rename")
            }
            committed.append((entry.target, backup))
        }
    }
}

// MARK: Swift-native forms: FilePath and URL paths, DataProtocol bytes

extension SignatureFiles {
    /// Reads a raw signature file.
    public static func read(_ path: FilePath) throws -> [UInt8] {
        try read(path.string)
    }
}
