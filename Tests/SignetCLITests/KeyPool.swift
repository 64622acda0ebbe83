import Foundation
import Synchronization
import Testing
import SignetTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Key sets made once per test process by `signet keygen`, copied into each ``Workspace`` and
/// TUF `Fleet` (issue 50: ~390 RSA key generations a run, ~130 s of CPU). Within one test, the
/// n-th key set asked for is the n-th of the pool, so every Workspace (and every key name of a
/// Fleet) in a test has a key of its own, as when each made one; different tests share them,
/// which no test can tell, since each works in its own folders.
enum KeyPool {
    private struct State {
        /// Slot → the folder holding its keys and its key id.
        var made: [String: (folder: String, keyID: String)] = [:]
        /// Test → how many key sets it took so far.
        var taken: [String: Int] = [:]
    }
    private static let state = Mutex(State())
    /// One generation at a time: the same slot is never made twice.
    private static let making = NSLock()

    static let root: String = {
        let path = NSTemporaryDirectory() + "signet-keypool-\(getpid())"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        atexit { try? FileManager.default.removeItem(atPath: KeyPool.root) }
        return path
    }()

    /// The current test's next slot (0, 1, 2, … in the order it asks).
    static func nextSlot() -> Int {
        let test = Test.current.map { "\($0.id)" } ?? "no test"
        return state.withLock { state in
            defer { state.taken[test, default: 0] += 1 }
            return state.taken[test, default: 0]
        }
    }

    /// Copies key set `slot` of `kind` into `destination` (made with `passphraseFile` for the
    /// private keys when given, else unencrypted) and returns its key id.
    static func copy(_ kind: String, slot: Int, to destination: String, passphraseFile: String?) throws -> String {
        let name = "\(kind)-\(slot)"
        let made = try make(name, passphraseFile: passphraseFile)
        try FileManager.default.createDirectory(atPath: destination, withIntermediateDirectories: true)
        var folder = stat()
        if stat(made.folder, &folder) == 0 { chmod(destination, folder.st_mode & 0o7777) }
        for file in try FileManager.default.contentsOfDirectory(atPath: made.folder) {
            let from = made.folder + "/" + file, to = destination + "/" + file
            try FileManager.default.copyItem(atPath: from, toPath: to)
            var info = stat()
            if stat(from, &info) == 0 { chmod(to, info.st_mode & 0o7777) }
        }
        return made.keyID
    }

    private static func make(_ name: String, passphraseFile: String?) throws -> (folder: String, keyID: String) {
        if let made = state.withLock({ $0.made[name] }) { return made }
        making.lock()
        defer { making.unlock() }
        if let made = state.withLock({ $0.made[name] }) { return made }
        let folder = root + "/" + name
        let result = try CLI.run(["keygen", "--out", folder, "--bits", "2048", "--json"] + (passphraseFile.map { ["--passphrase-file", $0] } ?? []))
        guard result.status == 0, let id = try result.json()["key_id"] as? String else {
            throw SupportError("keygen failed: \(result.status) \(result.stderr)")
        }
        state.withLock { $0.made[name] = (folder, id) }
        return (folder, id)
    }
}
