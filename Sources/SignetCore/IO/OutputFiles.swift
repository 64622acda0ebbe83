#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Signet's one rule for outputs (FORMAT.md §4): an output that exists is replaced
/// only when the user says so (`--force`).
public enum OutputFiles {
    /// Refuses (``SignetError/Code/fileExists``, exit 5) when anything is at `path` (a dangling
    /// link too), unless it is the same file (device and inode, through a link or not) as one of
    /// `inputs`: that case is left to the writer, which refuses it as an input it would destroy
    /// (exit 2), the more precise error. Called before any work, so nothing is written.
    public static func refuseExisting(_ path: String, what: String, inputs: [String] = []) throws {
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        let target = Set([FileIdentity.of(path, followLinks: false), FileIdentity.of(path)].compactMap { $0 })
        if inputs.contains(where: { FileIdentity.of($0).map(target.contains) ?? false }) { return }
        throw SignetError.existingOutput(path, what: what)
    }
}
