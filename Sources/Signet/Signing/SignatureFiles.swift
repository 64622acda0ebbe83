#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Detached signature files: the raw signature bytes and nothing else (FORMAT.md §1).
public enum SignatureFiles {
    /// Reads a signature file. Its length is judged by the verifier, not here.
    public static func read(_ path: String) throws -> [UInt8] {
        try readSmallFile(path, what: "signature file", limit: 1 << 20)
    }

    /// Writes each signature to the path at the same index, all or nothing: every signature is
    /// first written and flushed to a temporary file beside its target, and only when all of them
    /// are on disk are they renamed into place (replacing older signatures).
    public static func write(_ signatures: [Signature], to paths: [String]) throws {
        precondition(signatures.count == paths.count, "one path per signature")
        var staged: [(temporary: String, target: String)] = []
        do {
            for (signature, path) in zip(signatures, paths) {
                let temporary = AtomicFile.parentDirectory(of: path) + "/.signet-staged-\(getpid())-\(staged.count)-" + (path.split(separator: "/").last.map(String.init) ?? "sig")
                try AtomicFile.write(signature.bytes, to: temporary, mode: 0o644, replace: false)
                staged.append((temporary, path))
            }
        } catch {
            for entry in staged { unlink(entry.temporary) }
            throw error
        }
        for (index, entry) in staged.enumerated() where rename(entry.temporary, entry.target) != 0 {
            let err = errno
            for rest in staged[index...] { unlink(rest.temporary) }
            throw SignetError.posix(err, "cannot write signature", path: entry.target)
        }
    }
}
