import Foundation
internal import SystemPackage
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore

/// `DIR/.signet-trust`: the SHA-256 of every file in a trust directory, so that a key file
/// replaced on a compromised device is caught before it is trusted. Either protection needs
/// something the attacker cannot change in the directory: a salt kept elsewhere, or a seal
/// signature checked against a key given separately (`--trust-seal-key`).
public enum TrustStoreSeal {
    /// The seal file.
    public static let fileName = ".signet-trust"
    /// Its signature, when sealed with a key.
    public static let signatureName = ".signet-trust.sig"

    private struct Document: Codable {
        struct Entry: Codable {
            let path: String
            let sha256: String
        }
        let files: [Entry]
        let format: String
        let salted: Bool
    }

    /// Reads a salt file: every byte of it, so that a binary secret (`head -c 32 /dev/urandom`)
    /// is used whole, less one final line ending (`\n` or `\r\n`), so that a text secret written
    /// with `echo` salts the same as without it. An empty salt is refused (exit 4): it would
    /// protect nothing. `option` names the flag in messages (`--salt-file`).
    public static func readSalt(from path: String, option: String = "--salt-file") throws -> [UInt8] {
        var bytes: [UInt8]
        do {
            bytes = try readSmallFile(path, what: "salt file", limit: 64 * 1024, allowPipes: true)
        } catch let error as SignetError where error.code == .fileNotFound {
            // Not named: a secret given where its file's name belongs must not reach a log.
            throw SignetError(
                .fileNotFound,
                "the salt file given with \(option) does not exist (its name is not repeated here, in case it is the secret itself); give the path of a file that holds the salt"
            )
        }
        if bytes.last == UInt8(ascii: "\n") {
            bytes.removeLast()
            if bytes.last == UInt8(ascii: "\r") { bytes.removeLast() }
        }
        guard !bytes.isEmpty else {
            throw SignetError(
                .emptyPassphrase, "the salt file '\(path)' given with \(option) is empty; put a secret in it, e.g. head -c 32 /dev/urandom > '\(path)'",
                path: path)
        }
        return bytes
    }

    /// Writes the seal for `directory` (replacing an older one). With `salt`, each digest is
    /// SHA-256(salt || content); with `signer`, the seal is signed into `.signet-trust.sig`.
    @discardableResult
    public static func seal(_ directory: String, salt: [UInt8]? = nil, signer: Signer? = nil) throws -> Int {
        if let salt, salt.isEmpty {
            throw SignetError(.malformedInput, "the salt is empty; a salt must be a secret (the contents of --salt-file)")
        }
        let bytes = try document(for: directory, salt: salt)
        try AtomicFile.write(bytes, to: directory + "/" + fileName, mode: 0o644, replace: true)
        if let signer {
            try AtomicFile.write(try signer.sign(bytes).bytes, to: directory + "/" + signatureName, mode: 0o644, replace: true)
        } else {
            unlink(directory + "/" + signatureName)
        }
        return try files(in: directory).count
    }

    /// Refuses (exit 3) a sealed directory whose files no longer match the seal.
    ///
    /// A salt or seal keys are a demand for protection, so their absence never disables it: with
    /// `salt`, the directory must carry a seal made with a salt; with `sealKeys`, it must carry a
    /// seal signed by one of them (keys that live outside the directory: a signature checked with
    /// keys from inside it would prove nothing, as whoever swaps a key can sign a new seal with
    /// it). Only without either is an unsealed directory accepted as it is.
    package static func check(_ directory: String, salt: [UInt8]?, sealKeys: [PublicKey] = []) throws {
        func broken(_ reason: String) -> SignetError {
            SignetError(
                .brokenTrustSeal,
                "trust directory '\(directory)' does not match its seal: \(reason); restore the trusted keys or seal the directory again with signet trust seal",
                path: directory)
        }
        if let salt, salt.isEmpty {
            throw SignetError(.malformedInput, "the trust salt is empty; a salt must be a secret (the contents of --trust-salt-file)")
        }
        let sealPath = directory + "/" + fileName
        let stored: [UInt8]
        do {
            stored = try InputFile.open(sealPath, what: "trust seal", followSymlinks: false).readAll(limit: 16 << 20, what: "trust seal")
        } catch let error as SignetError where error.code == .fileNotFound {
            if salt == nil && sealKeys.isEmpty { return }
            // A mistyped directory is a wrong path, not a broken seal: say so, as without a salt.
            do { _ = try Paths.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC) } catch {
                throw SignetError.posix(error, "cannot read trust directory", path: directory)
            }
            let demand = sealKeys.isEmpty ? "--trust-salt-file" : "--trust-seal-key"
            throw broken("it has no seal (\(fileName)), but \(demand) requires one")
        }
        guard let sealed = parse(stored) else {
            throw broken("the seal is not a signet-trust/1 document")
        }
        if !sealKeys.isEmpty {
            let signature: [UInt8]
            do {
                signature = try InputFile.open(directory + "/" + signatureName, what: "trust seal signature", followSymlinks: false)
                    .readAll(limit: 64 * 1024, what: "trust seal signature")
            } catch let error as SignetError where error.code == .fileNotFound {
                signature = []
            }
            let digest = try Digest.compute(stored, algorithm: .sha256)
            guard Verifier(policy: TrustPolicy(keys: sealKeys)).verify(signature: signature, digest: digest).isValid else {
                throw broken(
                    signature.isEmpty
                        ? "the seal is not signed, but --trust-seal-key requires it" : "the seal's signature does not verify with the --trust-seal-key key")
            }
        }
        if salt != nil, !sealed.salted {
            // Anyone can write an unsalted seal; one the salt's holder did not make proves nothing.
            throw broken("the seal was made without a salt, but --trust-salt-file was given (it was replaced, or sealed without --salt-file)")
        }
        if sealed.salted, salt == nil {
            throw broken("it was sealed with a salt; give the salt with --trust-salt-file")
        }
        let current = try JSONDecoder().decode(Document.self, from: Data(try document(for: directory, salt: sealed.salted ? salt : nil)))
        // Names compared as bytes, as the filesystem compares them: Swift's String equality is
        // canonical equivalence, under which `Key.der` and `\u{212A}ey.der` (KELVIN SIGN) are one
        // key of a dictionary while the loader reads both files.
        var expected: [[UInt8]: String] = [:]
        for file in sealed.files where expected.updateValue(file.sha256, forKey: Array(file.path.utf8)) != nil {
            throw broken("the seal lists '\(file.path)' twice")
        }
        var actual: [[UInt8]: String] = [:]
        for file in current.files { actual[Array(file.path.utf8)] = file.sha256 }
        let names = Set(expected.keys).union(actual.keys).sorted { $0.lexicographicallyPrecedes($1) }
        // With a salt, a wrong salt file changes every digest: when the same files are there and
        // none matches, say so instead of pointing at one file as if it had been attacked.
        let changed = names.filter { expected[$0] != nil && actual[$0] != nil && expected[$0] != actual[$0] }
        if sealed.salted, !changed.isEmpty, changed.count == names.count {
            let only = changed.count == 1 ? "its only file '\(String(decoding: changed[0], as: UTF8.self))'" : "none of its \(changed.count) files"
            throw SignetError(
                .brokenTrustSeal,
                "trust directory '\(directory)' does not match its seal with this salt: \(only) matches its sealed digest. Most likely --trust-salt-file is not the salt the directory was sealed with; otherwise \(changed.count == 1 ? "that file was" : "every file was") changed. Check the salt file, then restore the trusted keys or seal the directory again with signet trust seal",
                path: directory)
        }
        for name in names where expected[name] != actual[name] {
            let path = String(decoding: name, as: UTF8.self)
            throw broken(
                expected[name] == nil
                    ? "'\(path)' was added"
                    : actual[name] == nil
                        ? "'\(path)' was removed"
                        : "'\(path)' was changed\(sealed.salted ? " (the other files match with this salt, so the salt is right)" : "")")
        }
    }

    /// A seal's document, if `stored` is strict JSON in the signet-trust/1 shape.
    package static func parse(_ stored: [UInt8]) -> (files: [(path: String, sha256: String)], salted: Bool)? {
        guard (try? StrictJSON.check(stored)) != nil,
            let sealed = try? JSONDecoder().decode(Document.self, from: Data(stored)), sealed.format == "signet-trust/1"
        else { return nil }
        return (sealed.files.map { ($0.path, $0.sha256) }, sealed.salted)
    }

    /// The key and certificate files of a trust directory, relative, sorted, with their channel
    /// (the first directory on the path, nil at the top). Links and other non-files are refused.
    /// The seal's own files and a top-level `.signet/` (the record of a directory installed
    /// from a package, FORMAT.md §6) are not among them.
    package static func files(in directory: String) throws -> [(String, String?)] {
        var found: [(String, String?)] = []
        // Through descriptors (openat, fstatat), so neither depth nor path length limits it.
        func walk(_ fd: FileDescriptor, _ path: String, _ prefix: String) throws {
            let entries: [DirectoryEntries.Entry]
            do { entries = try DirectoryEntries.list(fd) } catch let failure as SystemCallFailure {
                throw SignetError.posix(failure, "cannot read trust directory", path: path)
            }
            // A name that is not UTF-8 cannot be sealed (the seal is JSON) nor told apart from
            // another after repair: refused, as pack refuses it.
            if let bad = entries.first(where: { String(validating: $0.rawName.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self) == nil }) {
                throw SignetError(.malformedInput, "'\(path)/\(bad.name)' in a trust directory has a name that is not UTF-8; rename it", path: path)
            }
            // At the top: the seal itself, and `.signet/` where Signet installed the directory
            // from a package (its manifest and signatures: not keys, and not the seal's business).
            let names = entries.map(\.name).filter {
                !(prefix.isEmpty
                    && ($0.utf8.elementsEqual(fileName.utf8) || $0.utf8.elementsEqual(signatureName.utf8)
                        || $0.utf8.elementsEqual(TreeLayout.directory.utf8)))
            }
            for name in names.sorted(by: ResourcePath.byteOrder) {
                let relative = prefix.isEmpty ? name : prefix + "/" + name
                var info = stat()
                do { _ = try systemCall("fstatat") { fstatat(fd.rawValue, name, &info, AT_SYMLINK_NOFOLLOW) } } catch {
                    throw SignetError.posix(error, "cannot read", path: path + "/" + name)
                }
                switch info.st_mode & S_IFMT {
                case S_IFDIR:
                    let sub: OwnedDescriptor
                    do {
                        sub = OwnedDescriptor(adopting: try systemCall("openat") { openat(fd.rawValue, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) })
                    } catch {
                        throw SignetError.posix(error, "cannot read trust directory", path: path + "/" + name)
                    }
                    try walk(sub.descriptor, path + "/" + name, relative)
                case S_IFREG: found.append((relative, relative.split(separator: "/").count > 1 ? String(relative.split(separator: "/")[0]) : nil))
                default:
                    throw SignetError(
                        .malformedInput, "'\(path)/\(name)' in a trust directory is not a regular file; trust directories hold key and certificate files only",
                        path: path + "/" + name)
                }
            }
        }
        let opened: OwnedDescriptor
        do { opened = try Paths.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC) } catch {
            throw SignetError.posix(error, "cannot read trust directory", path: directory)
        }
        try walk(opened.descriptor, directory, "")
        return found
    }

    private static func document(for directory: String, salt: [UInt8]?) throws -> [UInt8] {
        let entries = try files(in: directory).map { (path, _) -> Document.Entry in
            let hasher = try Digest.Hasher(.sha256)
            if let salt { salt.withUnsafeBytes { hasher.update($0) } }
            try InputFile.open(directory + "/" + path, what: "trusted key", followSymlinks: false).forEachChunk { hasher.update($0) }
            return Document.Entry(path: path, sha256: try hasher.finalize().hex)
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        return Array(try encoder.encode(Document(files: entries, format: "signet-trust/1", salted: salt != nil))) + [UInt8(ascii: "\n")]
    }
}

extension TrustStoreSeal {
    /// Whether `directory` holds a seal file (`.signet-trust`, not through a link).
    package static func isSealed(_ directory: String) -> Bool {
        var info = stat()
        return lstat(directory + "/" + fileName, &info) == 0 && info.st_mode & S_IFMT == S_IFREG
    }
}
