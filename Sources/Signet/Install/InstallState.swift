import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// `--state FILE`: the highest `sequence` installed per package `name`, across every destination
/// that uses the file, so a package cannot be rolled back by installing it somewhere else.
/// Read and updated under an exclusive lock (`FILE.lock`), written atomically.
final class InstallState {
    let path: String
    private let lock: Int32
    private(set) var sequences: [String: UInt64]

    /// Opens (creating if needed) and locks the state; blocks while another install holds it.
    init(path: String) throws {
        self.path = path
        let lock = open(path + ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard lock >= 0 else { throw SignetError.posix(errno, "cannot open the lock of install state", path: path) }
        guard retryingOnEINTR({ flock(lock, LOCK_EX) }) == 0 else {
            let err = errno
            close(lock)
            throw SignetError.posix(err, "cannot lock install state", path: path)
        }
        self.lock = lock
        if access(path, F_OK) == 0 {
            let bytes = try readSmallFile(path, what: "install state", limit: 16 << 20)
            guard let decoded = try? JSONDecoder().decode([String: UInt64].self, from: Data(bytes)) else {
                throw SignetError(.malformedInput, "install state '\(path)' is not a JSON object of package names and sequences; restore it or remove it", path: path)
            }
            sequences = decoded
        } else {
            sequences = [:]
        }
    }

    deinit {
        _ = flock(lock, LOCK_UN)
        close(lock)
    }

    /// Records `sequence` for `name` if it is higher than what is recorded.
    func record(_ name: String, sequence: UInt64) throws {
        guard sequence > sequences[name] ?? 0 || sequences[name] == nil else { return }
        sequences[name] = sequence
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        try AtomicFile.write(Array(try encoder.encode(sequences)) + [UInt8(ascii: "\n")], to: path, mode: 0o644, replace: true)
    }
}
