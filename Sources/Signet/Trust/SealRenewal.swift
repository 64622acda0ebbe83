import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Renewing a sealed directory's seal when an install replaces the directory (`--reseal`,
/// FORMAT.md §6): how a trust directory, or a folder of TLS roots, rotates through a channel.
///
/// The new tree is sealed with the device's salt in the staging directory, after every file
/// verified and before the swap, so that the directory is never in place unsealed: the seal
/// and the files it covers appear together. Before the swap the new tree is also loaded the
/// way the next run will load it (as a trust directory, or as TLS roots), so that a package
/// that would leave the device unable to verify its next update is refused instead of
/// installed.
public struct SealRenewal: Sendable {
    /// What the sealed directory is used as, which decides the check of the new tree.
    public enum Use: Sendable, Equatable {
        /// A `--trust-dir`: the new tree must load as one and trust at least one key that may
        /// sign `channel` (a key at its top level, or in that channel's folder; any key when nil).
        case trustDirectory(channel: String?)
        /// A `--tls-ca` directory: the new tree must hold at least one CA certificate.
        case tlsRoots
        /// Neither: the new tree is only sealed.
        case other
    }

    /// The salt the directory is sealed with (the contents of `--trust-salt-file`).
    public var salt: [UInt8]
    /// What the directory is used as.
    public var use: Use
    /// Accept keys below 2048 bits in the new tree (as the trust options do).
    public var allowWeakKeys = false

    /// Renews the seal with `salt` for a directory used as `use`.
    public init(salt: [UInt8], use: Use = .other) {
        self.salt = salt
        self.use = use
    }

    /// Refuses a package that brings a seal of its own: the device's seal would replace it.
    func refuseOwnSeal(_ paths: [String], package: String) throws {
        for name in [TrustStoreSeal.fileName, TrustStoreSeal.signatureName] where paths.contains(where: { $0.utf8.elementsEqual(name.utf8) }) {
            throw SignetError(.usage, "'\(package)' brings its own trust seal ('\(name)'), which --reseal would replace with one made with this device's salt; install it without --reseal (with --trust-seal-key, the publisher's signed seal is checked as it is)", path: package, entry: name)
        }
    }

    /// Whether `destination`, a directory Signet did not install, may be replaced: it carries a
    /// seal made with this salt and matches it (the device's own sealed directory).
    func adopts(_ destination: String) -> Bool {
        TrustStoreSeal.isSealed(destination) && (try? TrustStoreSeal.check(destination, salt: salt)) != nil
    }

    /// Seals the staged tree at `staged` with the salt, then loads it as its use requires.
    func renew(staged: String, destination: String, package: String) throws {
        do {
            try TrustStoreSeal.seal(staged, salt: salt)
        } catch var error as SignetError {
            error.reason = "cannot seal the new tree for '\(destination)': " + error.reason
            throw error
        }
        func refused(_ reason: String) -> SignetError {
            SignetError(.trustLockout, "'\(package)' would leave '\(destination)' \(reason), and this device unable to verify its next update; nothing was installed. Publish a tree that keeps at least one key the device's updates are signed with", path: package)
        }
        do {
            switch use {
            case .trustDirectory(let channel):
                var policy = TrustPolicy(keys: [])
                try policy.addTrustDirectory(staged, allowWeakKeys: allowWeakKeys, salt: salt)
                let usable = policy.keys.filter { key in channel == nil || policy.channel(of: key.keyID).map { $0 == channel } ?? true }
                if usable.isEmpty {
                    throw refused(policy.keys.isEmpty ? "trusting no key" : "trusting no key that may sign channel '\(channel ?? "")' (the keys are in other channels' folders)")
                }
            case .tlsRoots:
                var roots = TLSPolicy()
                try roots.addRoots(from: staged, salt: salt)
            case .other:
                break
            }
        } catch var error as SignetError where error.code != .trustLockout {
            error.reason = "the new tree for '\(destination)' from '\(package)' cannot be used: " + error.reason.replacingOccurrences(of: staged, with: destination)
            error.path = package
            throw error
        }
    }
}

extension TrustStoreSeal {
    /// Whether `directory` holds a seal file (`.signet-trust`, not through a link).
    static func isSealed(_ directory: String) -> Bool {
        var info = stat()
        return lstat(directory + "/" + fileName, &info) == 0 && info.st_mode & S_IFMT == S_IFREG
    }
}
