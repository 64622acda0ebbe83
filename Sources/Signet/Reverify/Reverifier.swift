import Foundation
import Synchronization
internal import CSignetShims
internal import SystemPackage
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What re-verification found for one file. An open set; a verdict, not an error.
public struct FileVerdict: Hashable, Sendable, CustomStringConvertible {
    /// Stable identifier, as in `--json` output.
    public let name: String
    /// Creates a verdict. Prefer the static members.
    public init(_ name: String) { self.name = name }
    public var description: String { name }

    /// The content verifies with a trusted signature.
    public static let ok = FileVerdict("ok")
    /// A lost attribute was restored (`--repair`) after the content was checked.
    public static let repaired = FileVerdict("repaired")
    /// A signature is present but the content no longer matches it (or the manifest).
    public static let modified = FileVerdict("modified")
    /// No signature attribute and no sidecar.
    public static let unsigned = FileVerdict("unsigned")
    /// Signed by a key that is not trusted.
    public static let untrusted = FileVerdict("untrusted")
    /// Could not be read (or is a symbolic link, which is never followed).
    public static let unreadable = FileVerdict("unreadable")
    /// In the manifest, not on disk.
    public static let missing = FileVerdict("missing")
    /// On disk, not in the manifest.
    public static let added = FileVerdict("added")
    /// The content matches the signed manifest but its signature attribute is gone or wrong.
    public static let attributesLost = FileVerdict("attributes-lost")
    /// The content is the signed one but the file's mode is not the manifest's (`chmod 4777`, a
    /// config made writable by others), or a folder's is not 0755; `--repair` restores it.
    public static let modeChanged = FileVerdict("mode-changed")

    /// True for `ok` and `repaired`.
    public var isOK: Bool { self == .ok || self == .repaired }
}

/// Where an installed file's signature was found (FORMAT.md §3).
public enum SignatureSource: String, Sendable, CustomStringConvertible {
    /// The `user.signet.sig` attribute.
    case xattr
    /// An IMA v2 attribute (`user.ima` or `security.ima`).
    case ima
    /// The tree's sidecar, `.signet/sigs/PATH.sig`.
    case sidecar
    /// The tree's record of the signatures unpack installed, `.signet/signatures` (what
    /// `--repair` restores a lost attribute from in a tree with user xattrs).
    case record

    /// The name printed in reports ("xattr", "ima", "sidecar", "record").
    public var description: String { rawValue }
}

/// One file's re-verification.
public struct FileReport: Sendable {
    /// The path (relative to the tree's root in a tree report).
    public let path: String
    /// The verdict.
    public let verdict: FileVerdict
    /// A sentence for a person.
    public let detail: String
    /// Where the signature came from, when one was found.
    public let signatureSource: SignatureSource?
    /// The key that verified it.
    public let signer: KeyID?
    /// For a structured resource whose bytes differ from the signed ones: every key path that
    /// changed, was added or was removed, each marked allowed or not. Empty otherwise.
    public internal(set) var changedKeys: [KeyChange] = []
    /// For an `unreadable` file checked on its own: the error that made it so (its code tells a
    /// missing file, exit 5, from a directory or link given as a file, exit 4).
    public internal(set) var error: SignetError? {
        get { errorBox?.error }
        set { errorBox = newValue.map(ErrorBox.init) }
    }
    /// The error kept behind one pointer: a report of 50,000 files holds 50,000 of these, and a
    /// `SignetError` inline would make each one 150 bytes larger.
    var errorBox: ErrorBox? = nil
    final class ErrorBox: Sendable {
        let error: SignetError
        init(_ error: SignetError) { self.error = error }
    }
}

/// A whole installed tree's re-verification.
public struct TreeReport: Sendable {
    /// The tree.
    public let root: String
    /// Its manifest, when the manifest verified.
    public let manifest: Manifest?
    /// The trusted key that signed the manifest.
    public let signer: PublicKey?
    /// Set when the manifest itself did not verify (then `files` is empty).
    public let manifestFailure: PackageVerification.Failure?
    /// Why, for a person.
    public let manifestMessage: String?
    /// Every checked file, sorted by path.
    public let files: [FileReport]
    /// False when the filesystem has no user extended attributes (sidecars were used).
    public let attributesSupported: Bool
    /// Wall time in seconds.
    public let duration: Double

    /// Number of files per verdict.
    public var counts: [FileVerdict: Int] { files.reduce(into: [:]) { $0[$1.verdict, default: 0] += 1 } }
    /// True when the manifest verified and every file is ok (or repaired).
    public var isOK: Bool { manifestFailure == nil && files.allSatisfy(\.verdict.isOK) }
}

/// Which files of a tree are checked.
public struct ReverifyOptions: Sendable {
    /// Glob patterns for files allowed to change, with `.gitignore`'s rules (FORMAT.md §4,
    /// "Patterns"): "*.log" and "cache" match a name at any depth, "var/tmp/*" is anchored at
    /// the tree's root and `*` stays within one folder, `**` crosses folders.
    public var exclude: [String] = []
    /// Only these subtrees (relative paths); empty for all.
    public var only: [String] = []
    /// Restore lost signature attributes from `.signet/sigs/`, after checking the content.
    public var repair = false
    /// The package the tree must hold (`--expect-name`): another name, or a bare tree, fails
    /// the whole tree (`other-package`).
    public var expectedName: String? = nil
    /// An install state file (`--state`, as unpack writes it): the tree must hold the package
    /// and kind recorded for it there, and no lower sequence than the highest recorded for its
    /// name (`other-package`, `relabelled-tree`, `rollback`).
    public var stateFile: String? = nil
    /// Key paths allowed to change, by the resource path of a structured file (a file packed
    /// with `--structured`): where only these differ, the file is `ok` with a note. Every file
    /// and key path named must exist in the signed tree (checked before anything else).
    public var allowedKeys: [String: [KeyPath]] = [:]
    /// Told how many files and bytes of a tree have been checked, from the checking threads.
    public var progress: ProgressHandler? = nil

    /// Everything, no repair.
    public init() {}

    /// Allows `keyPath` of structured resource `file` to change.
    public mutating func allow(_ keyPath: KeyPath, in file: String) {
        allowedKeys[file, default: []].append(keyPath)
    }

    /// Adds `other`'s rules to these (exclusions, subtrees and allowed keys; repair if either asks).
    public mutating func merge(_ other: ReverifyOptions) {
        exclude += other.exclude
        only += other.only
        repair = repair || other.repair
        for (file, keys) in other.allowedKeys { allowedKeys[file, default: []] += keys }
    }

    /// Reads a rules file (FORMAT.md §4, "Rules files"): a JSON object with any of
    /// `exclude` (array of patterns), `only` (array of subtrees) and `allow_keys` (object from a
    /// resource path to an array of key paths). Anything else in it, a wrong type or a key
    /// path that does not parse is `.usage` (exit 2); a file that cannot be read is an I/O error.
    public init(rulesFile path: String) throws {
        let bytes = try readSmallFile(path, what: "rules file", limit: 1 << 20)
        func wrong(_ reason: String) -> SignetError {
            SignetError(.usage, "rules file '\(path)': \(reason); a rules file is a JSON object with \"exclude\", \"only\" and \"allow_keys\" (see signet help reverify)", path: path)
        }
        let value: StructuredValue
        do { value = try StructuredValue.json(bytes) } catch {
            throw wrong("\(error)")
        }
        guard case .dictionary(let fields) = value else { throw wrong("it is not a JSON object") }
        func strings(_ name: String, _ value: StructuredValue) throws -> [String] {
            guard case .array(let items) = value else { throw wrong("\"\(name)\" is not an array of strings") }
            return try items.map { item in
                guard case .string(let text) = item, !text.isEmpty else { throw wrong("\"\(name)\" holds something other than non-empty strings") }
                return text
            }
        }
        self.init()
        for (key, field) in fields.sorted(by: { $0.key < $1.key }) {
            switch key.text {
            case "exclude": exclude = try strings("exclude", field)
            case "only": only = try strings("only", field)
            case "allow_keys":
                guard case .dictionary(let files) = field else { throw wrong("\"allow_keys\" is not an object from file paths to arrays of key paths") }
                for (file, keys) in files.sorted(by: { $0.key < $1.key }) {
                    for text in try strings("allow_keys.\(file.text)", keys) {
                        guard let keyPath = KeyPath(text) else { throw wrong("\"\(text)\" in allow_keys.\(file.text) is not a key path (dotted keys such as server.url or items.*.name)") }
                        allow(keyPath, in: file.text)
                    }
                }
            default:
                throw wrong("it has the field \"\(key.text)\", which Signet does not know (a misspelt rule would silently check more or less than meant)")
            }
        }
    }

    /// Refuses (`.usage`, exit 2) an `only` selector that is not a relative path inside the tree
    /// ("..", absolute, empty) or that selects nothing the manifest lists: a check that checks
    /// nothing must not say OK.
    /// A selector without trailing slashes ("bin/" selects what "bin" does).
    private static func subtree(_ selector: String) -> String {
        var trimmed = selector
        while trimmed.hasSuffix("/") && trimmed.count > 1 { trimmed.removeLast() }
        return trimmed
    }

    func checkSelectors(against manifest: Manifest, root: String) throws {
        for selector in only {
            let trimmed = Self.subtree(selector)
            if case .failure(let refusal) = ResourcePath.validate(trimmed) {
                throw SignetError(.usage, "--only '\(selector)' is not a subtree of the installed tree: \(refusal.reason); give a path relative to '\(root)', e.g. --only bin", path: root)
            }
            guard manifest.files.contains(where: { $0.path == trimmed || $0.path.hasPrefix(trimmed + "/") }) else {
                throw SignetError(.usage, "--only '\(selector)' matches no file in the signed manifest of '\(root)'; check the spelling (paths are relative to the tree, e.g. --only bin)", path: root)
            }
        }
        if !manifest.files.isEmpty, !manifest.files.contains(where: { selects($0.path) }) {
            throw SignetError(.usage, "--only and --exclude leave no file of '\(root)' to check; a check of nothing cannot pass. Narrow --exclude", path: root)
        }
    }

    /// Refuses (`.usage`, exit 2) an allowed key whose file the manifest does not list or did
    /// not record as structured, or whose key path names nothing in the signed content: a rule
    /// that allows nothing must not pass unnoticed. The signed content is the tree's copy under
    /// `.signet/structured/`, used only when it matches the manifest (where it does not, the
    /// file's own check reports that).
    func checkAllowedKeys(against manifest: Manifest, rootFD: Int32, root: String) throws {
        guard !allowedKeys.isEmpty else { return }
        // By bytes, as the tree check looks them up.
        var listed: [[UInt8]: Manifest.File] = [:]
        let wanted = Set(allowedKeys.keys.map { Array($0.utf8) })
        for file in manifest.files where wanted.contains(Array(file.path.utf8)) { listed[Array(file.path.utf8)] = file }
        for (path, keys) in allowedKeys.sorted(by: { ResourcePath.byteOrder($0.key, $1.key) }) {
            guard let file = listed[Array(path.utf8)] else {
                throw SignetError(.usage, "an allowed key names '\(path)', which is not in the signed manifest of '\(root)'; give the path relative to the tree (e.g. config/app.json:server.url)", path: root)
            }
            guard let format = file.structured else {
                throw SignetError(.usage, "an allowed key names '\(path)', which was not packed as structured (pack --structured) and so is compared byte for byte; pack it with --structured to allow keys to change", path: root)
            }
            guard let signed = try? TreeChecker.signedContent(of: file, format: format, rootFD: rootFD, root: root).get() else { continue }
            for key in keys where !key.exists(in: signed) {
                throw SignetError(.usage, "the allowed key '\(key)' names nothing in the signed '\(path)' of '\(root)'; check the spelling (keys are joined by '.', array elements are numbers or '*')", path: root)
            }
        }
    }

    /// Whether the tree holds the expected package (`expectedName`, `stateFile`): nil when it
    /// does, else the failure and its message. `name` and `sequence` are nil for a bare tree.
    func expectationFailure(name: String?, sequence: UInt64?, root: String) throws -> (PackageVerification.Failure, String)? {
        let holds = name.map { "package '\($0)' sequence \(sequence ?? 0)" } ?? "a bare tree (no name)"
        if let expectedName, !Installer.sameName(expectedName, name) {
            return (.otherPackage, "'\(root)' holds \(holds), not package '\(expectedName)' (--expect-name)")
        }
        guard let stateFile else { return nil }
        let state = try InstallState.read(stateFile)
        if let recorded = state.destinations[InstallState.key(for: root)] {
            if recorded.kind == "manifest", name == nil {
                return (.relabelled, "'\(root)' was installed from the signed package '\(recorded.name ?? "?")' sequence \(recorded.sequence ?? 0) (recorded in '\(stateFile)'), but is now a bare tree: its manifest or manifest signature was removed. Reinstall the package")
            }
            if recorded.kind == "manifest", !Installer.sameName(recorded.name, name) {
                return (.otherPackage, "'\(root)' holds \(holds), but '\(stateFile)' records package '\(recorded.name ?? "?")' there: the tree was replaced by another product")
            }
        }
        if let name, let sequence, let highest = state.sequences[name], sequence < highest {
            return (.rollback, "'\(root)' holds \(name) sequence \(sequence), but sequence \(highest) was installed before (recorded in '\(stateFile)'): the tree was rolled back to an older release")
        }
        return nil
    }

    func selects(_ path: String) -> Bool {
        if !only.isEmpty, !only.contains(where: { selector in
            let subtree = Self.subtree(selector)
            return path == subtree || path.hasPrefix(subtree + "/")
        }) { return false }
        return !exclude.contains { ResourcePath.matches(pattern: $0, path) }
    }
}

/// Re-verifies installed files from their signature attributes (FORMAT.md §3).
public enum Reverifier {
    // MARK: Single files

    /// Re-verifies one file: opened once with O_NOFOLLOW; its signature (`user.signet.sig`, else
    /// an IMA attribute, else the sidecar of the installed tree it is in) and its content are read
    /// through that descriptor. Never throws: every outcome is a verdict.
    public static func verifyFile(at path: String, policy: TrustPolicy) -> FileReport {
        let file: InputFile
        do {
            file = try InputFile.open(path, what: "file", followSymlinks: false)
        } catch {
            return unreadable(path, error)
        }
        let report = verifyOpened(file, path: path, policy: policy) { descriptor, meta in
            try signatureOf(descriptor, path: path, meta: meta)
        }
        return damagedAttribute(report, file: file, path: path, policy: policy) ?? report
    }

    /// A file whose attribute does not verify may still be the signed content with a damaged
    /// attribute: when the installed tree's own copy of its signature verifies over the
    /// content, the verdict is `attributes-lost` (saying so), not `modified`. Nil otherwise.
    private static func damagedAttribute(_ report: FileReport, file: InputFile, path: String, policy: TrustPolicy) -> FileReport? {
        guard report.verdict == .modified, report.signatureSource == .xattr || report.signatureSource == .ima,
              let (root, relative) = installedTree(containing: path),
              let copy = try? treeCopy(root: root, relative: relative) else { return nil }
        let algorithm = Metadata(file.descriptor.rawValue)?.algorithm ?? .default
        guard lseek(file.descriptor.rawValue, 0, SEEK_SET) == 0,
              let digest = try? Digest.compute(descriptorOf: file, algorithm: algorithm.digest),
              let key = Verifier(policy: policy).verify(signature: copy, digest: digest, algorithm: algorithm).signer else { return nil }
        return FileReport(path: path, verdict: .attributesLost,
                          detail: "'\(path)' is the signed content (the installed tree's copy of its signature verifies with key \(key.keyID.short)), but its \(report.signatureSource == .ima ? "IMA attribute" : "user.signet.sig") is damaged or replaced; reverify '\(root)' --repair restores it",
                          signatureSource: .sidecar, signer: nil)
    }

    /// An `unreadable` verdict for `path`, carrying the error (its code decides the exit status).
    static func unreadable(_ path: String, _ error: Error) -> FileReport {
        let failure = error as? SignetError ?? SignetError(.io, "cannot read '\(path)': \(error)", path: path)
        var made = FileReport(path: path, verdict: .unreadable, detail: failure.reason, signatureSource: nil, signer: nil)
        made.error = failure
        return made
    }

    /// The check of ``verifyFile(at:policy:)`` on a file already opened; `findSignature` gives
    /// its signature, algorithm and source (nil: unsigned).
    static func verifyOpened(_ file: InputFile, path: String, policy: TrustPolicy,
                             findSignature: (Int32, Metadata?) throws -> ([UInt8], SignatureAlgorithm, SignatureSource)?) -> FileReport {
        func report(_ verdict: FileVerdict, _ detail: String, _ source: SignatureSource? = nil, _ signer: KeyID? = nil) -> FileReport {
            FileReport(path: path, verdict: verdict, detail: detail, signatureSource: source, signer: signer)
        }
        func unreadable(_ error: Error) -> FileReport { Reverifier.unreadable(path, error) }
        let meta = Metadata(file.descriptor.rawValue)
        let found: ([UInt8], SignatureAlgorithm, SignatureSource)?
        do { found = try findSignature(file.descriptor.rawValue, meta) } catch {
            return unreadable(error)
        }
        guard let (signature, algorithm, source) = found else {
            return report(.unsigned, "'\(path)' has no user.signet.sig or IMA attribute and no sidecar signature: it was not installed by Signet, or its attributes were stripped")
        }
        let digest: Digest
        do {
            digest = try Digest.compute(descriptorOf: file, algorithm: algorithm.digest)
        } catch {
            return unreadable(error)
        }
        let result = Verifier(policy: policy).verify(signature: signature, digest: digest, algorithm: algorithm)
        if let key = result.signer {
            return report(.ok, "verified with key \(key.keyID.short) (\(algorithm.id), from \(source))", source, key.keyID)
        }
        if result.failure == .untrusted {
            return report(.untrusted, "'\(path)': \(result.message)", source)
        }
        if let claimed = meta?.keyID, let refusal = policy.refusal(for: claimed) {
            return report(.untrusted, "'\(path)' is signed by key \(claimed.short), which the trust policy does not accept: \(refusal)", source)
        }
        return report(.modified, "'\(path)' does not match its signature (from \(source)): the content was changed, or the signature belongs to another file", source)
    }

    /// The signature, its algorithm and where it came from.
    /// A sidecar that cannot be read (other than absent) is an error, never "unsigned".
    static func signatureOf(_ descriptor: Int32, path: String, meta: Metadata?) throws -> ([UInt8], SignatureAlgorithm, SignatureSource)? {
        let algorithm = meta?.algorithm ?? .default
        if case .success(let bytes?) = ExtendedAttributes.get(ExtendedAttributes.signature, on: descriptor) {
            return (bytes, algorithm, .xattr)
        }
        for name in [IMASignature.userAttribute, IMASignature.securityAttribute] {
            if case .success(let bytes?) = ExtendedAttributes.get(name, on: descriptor),
               let ima = IMASignature(bytes: bytes), let imaAlgorithm = ima.signatureAlgorithm {
                return (ima.signature, imaAlgorithm, .ima)
            }
        }
        if let (root, relative) = installedTree(containing: path), let copy = try treeCopy(root: root, relative: relative) {
            return (copy, algorithm, .sidecar)
        }
        return nil
    }

    /// The installed tree's own copy of the signature of `relative`: its sidecar file
    /// (filesystems without user attributes, bare packages, older trees), else its entry in the
    /// tree's signature record. Nil when there is none; a read error is thrown, never taken for
    /// "none". Not verified here.
    static func treeCopy(root: String, relative: String) throws -> [UInt8]? {
        do {
            return try readSmallFile(root + "/" + TreeLayout.signature(of: relative), what: "sidecar signature", limit: 64 * 1024)
        } catch let error as SignetError where error.code == .fileNotFound {
            // No sidecar: the record, at the file's place in the manifest.
        }
        let rootFD: Int32
        do { rootFD = try Paths.open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC) } catch {
            throw SignetError.posix(error, "cannot open the installed tree", path: root)
        }
        defer { close(rootFD) }
        guard let bytes = try InputFile.readBeneath(rootFD, TreeLayout.manifest, rootPath: root, what: "installed manifest", limit: 64 << 20),
              let manifest = try? Manifest.parse(bytes),
              let index = manifest.files.firstIndex(where: { $0.path == relative }) else { return nil }
        return SignatureRecord.Reader(beneath: rootFD, files: manifest.files.count)?.signature(at: index)
    }

    /// The installed tree (a directory with `.signet/manifest.json`) that holds `path`, and the
    /// path relative to it.
    static func installedTree(containing path: String) -> (String, String)? {
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        var components = absolute.split(separator: "/").map(String.init)
        var relative: [String] = []
        while components.count > 1 {
            relative.insert(components.removeLast(), at: 0)
            let root = "/" + components.joined(separator: "/")
            if access(root + "/" + TreeLayout.manifest, F_OK) == 0 || access(root + "/" + TreeLayout.bareMarker, F_OK) == 0 {
                return (root, relative.joined(separator: "/"))
            }
        }
        return nil
    }

    /// Whether the directory `rootFD` is a tree unpack `--bare` installed: it has
    /// `.signet/bare` (or, from before that marker existed, `.signet/sigs/` and no manifest).
    static func isBareTree(_ rootFD: Int32) -> Bool {
        var info = stat()
        if fstatat(rootFD, TreeLayout.bareMarker, &info, AT_SYMLINK_NOFOLLOW) == 0 { return info.st_mode & S_IFMT == S_IFREG }
        guard fstatat(rootFD, TreeLayout.manifest, &info, AT_SYMLINK_NOFOLLOW) != 0 else { return false }
        return fstatat(rootFD, TreeLayout.signatures, &info, AT_SYMLINK_NOFOLLOW) == 0 && info.st_mode & S_IFMT == S_IFDIR
    }

    /// Where a tree that is marked bare says it came from a signed manifest: a file whose
    /// `user.signet.meta` names a package and sequence (a bare install records neither), or
    /// `.signet/signatures`, which only a manifest install writes. Such a tree had its
    /// manifest or manifest signature removed; treated as bare, it would lose the completeness,
    /// rollback and product checks. Nil when nothing says so (the files are read until one does).
    static func manifestOrigin(of rootFD: Int32, files walked: [String]? = nil) -> (name: String, sequence: UInt64)? {
        var info = stat()
        let recorded = fstatat(rootFD, TreeLayout.signatureRecord, &info, AT_SYMLINK_NOFOLLOW) == 0
        for relative in walked ?? (try? diskFiles(rootFD, root: "")) ?? [] {
            guard case .success(let fd) = Paths.open(relative, beneath: rootFD, flags: O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC) else { continue }
            defer { close(fd) }
            guard case .success(let bytes?) = ExtendedAttributes.get(TreeLayout.metadataAttribute, on: fd),
                  let object = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any],
                  let name = object["name"] as? String else { continue }
            return (name, (object["sequence"] as? NSNumber)?.uint64Value ?? 0)
        }
        return recorded ? ("(unknown)", 0) : nil
    }

    /// `user.signet.meta`, informational only: it picks the algorithm to try and names the
    /// claimed signer for the untrusted/modified distinction; it never makes a file "ok".
    struct Metadata {
        let algorithm: SignatureAlgorithm?
        let keyID: KeyID?
        let name: String?
        let sequence: UInt64?
        let path: String?
        let source: String?

        init?(_ descriptor: Int32) {
            guard case .success(let bytes?) = ExtendedAttributes.get(ExtendedAttributes.metadata, on: descriptor) else { return nil }
            self.init(bytes: bytes)
        }

        /// Parses the attribute's value; nil unless it is a strict JSON object.
        init?(bytes: [UInt8]) {
            guard (try? StrictJSON.check(bytes)) != nil,
                  let object = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any] else { return nil }
            algorithm = (object["alg"] as? String).flatMap { SignatureAlgorithm(id: $0) }
            keyID = (object["key_id"] as? String).flatMap { KeyID($0) }
            name = object["name"] as? String
            sequence = (object["sequence"] as? NSNumber)?.uint64Value
            path = object["path"] as? String
            source = object["source"] as? String
        }
    }

    // MARK: Trees

    /// Re-verifies a tree installed by unpack: its manifest first, then every listed file
    /// (selected by `options`) on all cores, and whatever else is on disk.
    public static func verifyTree(at root: String, policy: TrustPolicy, options: ReverifyOptions = ReverifyOptions()) throws -> TreeReport {
        try verifyTree(at: root, policy: policy, options: options, cancelled: CancellationFlag())
    }

    static func verifyTree(at root: String, policy: TrustPolicy, options: ReverifyOptions, cancelled: CancellationFlag) throws -> TreeReport {
        var root = root
        while root.count > 1 && root.hasSuffix("/") { root.removeLast() }
        // Everything is read through one descriptor of the tree, so the report is about one
        // tree even while unpack swaps DIR. A swap during the check shows as DIR naming another
        // directory afterwards; the check is then made again on the tree DIR names now.
        var attempt = 0
        while true {
            attempt += 1
            let fd: Int32
            do { fd = try Paths.open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC) } catch {
                throw SignetError.posix(error, "cannot open the installed tree", path: root)
            }
            defer { close(fd) }
            // Whether DIR still names the directory this check read (a failing stat means it was
            // swapped or removed meanwhile).
            func stillNamed() -> Bool {
                var held = stat()
                guard fstat(fd, &held) == 0, let named = try? Paths.lstat(root) else { return false }
                return held.st_dev == named.st_dev && held.st_ino == named.st_ino
            }
            let report: TreeReport
            do {
                report = try verifyTree(fd, root: root, policy: policy, options: options, cancelled: cancelled)
            } catch let error as SignetError where attempt < 3 && !stillNamed() {
                // The tree read was swapped out and is being removed (its files vanish under the
                // check): what DIR names now is checked instead of reporting the removal.
                _ = error
                continue
            }
            if stillNamed() || attempt == 3 { return report }
        }
    }

    private static func verifyTree(_ rootFD: Int32, root: String, policy: TrustPolicy, options: ReverifyOptions, cancelled: CancellationFlag) throws -> TreeReport {
        let started = DispatchTime.now()
        func elapsed() -> Double { Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9 }
        // What is on disk, listed and sorted on another core while this one reads, verifies and
        // parses the manifest (joined before returning: it reads through rootFD).
        let walk = OwnThreads.start { () throws -> (files: [String], folders: [(path: String, mode: UInt32)], unreadable: [(path: String, reason: String)], signet: [String]) in
            var found = try diskTree(rootFD, root: root)
            found.files.sort(by: ResourcePath.byteOrder)
            return (found.files, found.folders, found.unreadable, try signetFiles(rootFD, root: root))
        }
        defer { _ = walk.wait() }
        guard let manifestBytes = try InputFile.readBeneath(rootFD, TreeLayout.manifest, rootPath: root, what: "installed manifest", limit: 64 << 20),
              let manifestSignature = try InputFile.readBeneath(rootFD, TreeLayout.manifestSignature, rootPath: root, what: "installed manifest signature", limit: 64 * 1024) else {
            if isBareTree(rootFD) {
                // After the walk: it reads the same directory descriptor (whose offset a second
                // reader would share).
                let walked = try walk.wait().get().files
                if let origin = manifestOrigin(of: rootFD, files: walked) {
                    return TreeReport(root: root, manifest: nil, signer: nil, manifestFailure: .relabelled,
                                      manifestMessage: "'\(root)' is marked as a bare tree, but its files were installed from the signed package '\(origin.name)' sequence \(origin.sequence) (their user.signet.meta says so): its manifest or manifest signature was removed. Reinstall the package",
                                      files: [], attributesSupported: true, duration: elapsed())
                }
                if let (failure, message) = try options.expectationFailure(name: nil, sequence: nil, root: root) {
                    return TreeReport(root: root, manifest: nil, signer: nil, manifestFailure: failure, manifestMessage: message,
                                      files: [], attributesSupported: true, duration: elapsed())
                }
                var onDisk = walked
                onDisk.removeAll { $0.utf8.elementsEqual(TreeLayout.bareMarker.utf8) }
                return try verifyBareTree(rootFD, root: root, onDisk: onDisk, unreadable: try walk.wait().get().unreadable,
                                          policy: policy, options: options, cancelled: cancelled, elapsed: elapsed)
            }
            throw SignetError(.usage, "'\(root)' is not a tree installed by signet unpack (no .signet/manifest.json and .sig); give files, or the directory unpack installed", path: root)
        }
        let signerCertificate = try InputFile.readBeneath(rootFD, TreeLayout.signerCertificate, rootPath: root, what: "signer certificate", limit: 1 << 20)
        var chain: [[UInt8]] = []
        do {
            let certificates = try Paths.open(TreeLayout.certificates, beneath: rootFD, flags: O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC).get()
            defer { close(certificates) }
            // An unreadable chain is an error, never a chain quietly dropped.
            let names = try DirectoryEntries.list(certificates).map(\.name)
                .filter { TreeLayout.chainIndex(of: $0) != nil }
                .sorted { TreeLayout.chainIndex(of: $0)! < TreeLayout.chainIndex(of: $1)! }
            for name in names {
                if let der = try InputFile.readBeneath(rootFD, TreeLayout.certificates + "/" + name, rootPath: root, what: "certificate", limit: 1 << 20) { chain.append(der) }
            }
        } catch let failure as SystemCallFailure where failure.code != ENOENT {
            throw SignetError.posix(failure, "cannot read the certificates of", path: root + "/" + TreeLayout.certificates)
        } catch is SystemCallFailure {
            // No certificates folder: a package signed by a bare key.
        }
        let (resolved, certificateRefusal) = policy.resolved(signerCertificate: signerCertificate, chain: chain)
        let signer = try PackageReader.manifestSigner(manifestBytes, signature: manifestSignature, policy: resolved)
        // What unpack recorded of each file's signature, read and checked against its signature
        // on another core while this one parses the manifest (joined before returning: it opens
        // through rootFD). Where a file's attribute is still the recorded one, the content check
        // against the signed manifest is all that is needed (no RSA). A record that is missing
        // (older trees) or does not fit the manifest is not an error: every signature is then
        // verified.
        let recordRead = signer.map { key, algorithm in
            OwnThreads.start { SignatureRecord.Reader(beneath: rootFD, files: nil, key: key, algorithm: algorithm) }
        }
        defer { _ = recordRead?.wait() }
        let manifest = try Manifest.parse(manifestBytes, source: root + "/" + TreeLayout.manifest)
        guard let (key, algorithm) = signer, key.keyID == manifest.keyID, algorithm == manifest.algorithm else {
            let refusal = resolved.key(withID: manifest.keyID) == nil ? (certificateRefusal ?? policy.refusal(for: manifest.keyID)) : nil
            return TreeReport(root: root, manifest: nil, signer: nil, manifestFailure: refusal != nil ? .untrustedSigner : .badManifestSignature,
                              manifestMessage: refusal.map { "'\(root)' was installed from a package signed by key \(manifest.keyID.short), which the trust policy does not accept: \($0)" }
                                ?? "the installed manifest of '\(root)' does not verify: .signet/manifest.json or its signature was changed",
                              files: [], attributesSupported: true, duration: elapsed())
        }
        if let (failure, message) = try options.expectationFailure(name: manifest.name, sequence: manifest.sequence, root: root) {
            return TreeReport(root: root, manifest: manifest, signer: key, manifestFailure: failure, manifestMessage: message,
                              files: [], attributesSupported: true, duration: elapsed())
        }
        try options.checkSelectors(against: manifest, root: root)
        try options.checkAllowedKeys(against: manifest, rootFD: rootFD, root: root)
        let record = (try? recordRead?.wait().get())?.flatMap { $0.count == manifest.files.count ? $0 : nil }
        let checker = TreeChecker(root: root, descriptor: rootFD, manifest: manifest, key: key, algorithm: algorithm, repair: options.repair, record: record,
                                  allowedKeys: options.allowedKeys)
        let listed = manifest.files.indices.filter { options.selects(manifest.files[$0].path) }
        let progress = ProgressCounter.make(options.progress, items: listed.count, bytes: listed.reduce(0) { $0 &+ manifest.files[$1].size })
        var reports = parallelMap(listed, worker: { TreeChecker.Workspace() }) { workspace, position -> FileReport? in
            guard !cancelled.isSet else { return nil }
            let report = checker.check(manifest.files[position], at: position, in: workspace)
            progress?.add(bytes: Int(clamping: manifest.files[position].size), items: 1)
            return report
        }.compactMap { $0 }
        progress?.finish()
        if cancelled.isSet { throw CancellationError() }
        let disk = try walk.wait().get()
        for path in unlisted(disk.files, manifest) where options.selects(path) && !isDeviceSeal(path, rootFD: rootFD, root: root) {
            reports.append(FileReport(path: path, verdict: .added, detail: "'\(path)' is not in the signed manifest", signatureSource: nil, signer: nil))
        }
        for (path, reason) in disk.unreadable where options.selects(path) {
            reports.append(FileReport(path: path + "/", verdict: .unreadable, detail: "\(reason); files added there cannot be seen, and each file the manifest lists there is reported on its own", signatureSource: nil, signer: nil))
        }
        reports += folderReports(disk.folders, manifest: manifest, rootFD: rootFD, options: options)
        reports += signetReports(disk.signet, manifest: manifest, options: options)
        // In manifest order, which pack writes sorted: then only added files need sorting in.
        if !reports.indices.dropFirst().allSatisfy({ ResourcePath.byteOrder(reports[$0 - 1].path, reports[$0].path) }) {
            reports.sort { ResourcePath.byteOrder($0.path, $1.path) }
        }
        return TreeReport(root: root, manifest: manifest, signer: key, manifestFailure: nil, manifestMessage: nil,
                          files: reports, attributesSupported: !checker.sawUnsupported.isSet, duration: elapsed())
    }

    /// A tree unpack `--bare` installed: no manifest, so no completeness guarantee; each file
    /// on disk is checked against its own signature (its attribute, else its sidecar), verified
    /// with the trust policy, and a sidecar whose file is gone is `missing`.
    private static func verifyBareTree(_ rootFD: Int32, root: String, onDisk: [String], unreadable: [(path: String, reason: String)], policy: TrustPolicy, options: ReverifyOptions,
                                       cancelled: CancellationFlag, elapsed: () -> Double) throws -> TreeReport {
        guard options.allowedKeys.isEmpty else {
            throw SignetError(.usage, "'\(root)' was installed from a bare package, which has no structured files; --allow-key and allow_keys need a package made by signet pack --structured", path: root)
        }
        // The files the sidecars name.
        var signed: [String] = []
        var pending = [TreeLayout.signatures]
        while let folder = pending.popLast() {
            let fd: Int32
            switch Paths.open(folder, beneath: rootFD, flags: O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) {
            case .success(let opened): fd = opened
            case .failure(let failure) where failure.code == ENOENT: continue
            case .failure(let failure): throw SignetError.posix(failure, "cannot read the sidecar signatures in", path: root + "/" + folder)
            }
            defer { close(fd) }
            do {
                for entry in try DirectoryEntries.list(fd) {
                    let relative = folder + "/" + entry.name
                    if entry.isDirectory { pending.append(relative) } else if let resource = TreeLayout.resource(ofSignature: relative) { signed.append(resource) }
                }
            } catch let failure as SystemCallFailure {
                throw SignetError.posix(failure, "cannot read the sidecar signatures in", path: root + "/" + folder)
            }
        }
        let present = Set(onDisk.map { Array($0.utf8) })
        let signedSet = Set(signed.map { Array($0.utf8) })
        let paths = (onDisk + signed.filter { !present.contains(Array($0.utf8)) }).filter(options.selects)
        for selector in options.only where !paths.contains(where: { $0 == selector || $0.hasPrefix(selector + "/") }) {
            throw SignetError(.usage, "--only '\(selector)' matches no file of '\(root)'; check the spelling (paths are relative to the tree)", path: root)
        }
        let progress = ProgressCounter.make(options.progress, items: paths.count, bytes: 0)
        var reports = parallelMap(paths) { relative -> FileReport? in
            guard !cancelled.isSet else { return nil }
            defer { progress?.add(items: 1) }
            guard present.contains(Array(relative.utf8)) else {
                return FileReport(path: relative, verdict: .missing, detail: "'\(relative)' has a signature in \(TreeLayout.signatures)/ but is gone", signatureSource: nil, signer: nil)
            }
            let file: InputFile
            do {
                let fd = try Paths.open(relative, beneath: rootFD, flags: O_RDONLY | O_NOFOLLOW | O_CLOEXEC).get()
                file = try InputFile.adopt(fd, path: root + "/" + relative, what: "file")
            } catch {
                let failure = SignetError.posix(error, "cannot open", path: root + "/" + relative)
                return FileReport(path: relative, verdict: .unreadable, detail: failure.reason, signatureSource: nil, signer: nil)
            }
            let report = verifyOpened(file, path: relative, policy: policy) { descriptor, meta in
                try signatureOf(descriptor, path: root + "/" + relative, meta: meta)
            }
            // No signature anywhere: the file did not come from the package.
            guard report.verdict == .unsigned, !signedSet.contains(Array(relative.utf8)) else { return report }
            return FileReport(path: relative, verdict: .added, detail: "'\(relative)' was not installed from the bare package (it has no signature)", signatureSource: nil, signer: nil)
        }.compactMap { $0 }
        if cancelled.isSet { throw CancellationError() }
        progress?.finish()
        for (path, reason) in unreadable where options.selects(path) {
            reports.append(FileReport(path: path + "/", verdict: .unreadable, detail: "\(reason); the files there cannot be checked", signatureSource: nil, signer: nil))
        }
        reports.sort { ResourcePath.byteOrder($0.path, $1.path) }
        let untrusted = !reports.isEmpty && reports.allSatisfy { $0.verdict == .untrusted }
        return TreeReport(root: root, manifest: nil, signer: nil, manifestFailure: untrusted ? .untrustedSigner : nil,
                          manifestMessage: untrusted ? "'\(root)' was installed from a bare package signed by a key the trust policy does not accept" : nil,
                          files: reports, attributesSupported: !reports.contains { $0.signatureSource == .sidecar }, duration: elapsed())
    }

    /// The paths of `onDisk` (sorted by their bytes) that `manifest` does not list, compared
    /// byte for byte (what the filesystem compares): one merge when the manifest is in byte
    /// order too (as pack writes it), else a set of the manifest's paths.
    /// Whether `path` is the seal an install with `--reseal` wrote at the top of the tree
    /// (FORMAT.md §6): a regular `.signet-trust` holding a signet-trust/1 document. It is the
    /// device's, not the package's, and not reported as added.
    static func isDeviceSeal(_ path: String, rootFD: Int32, root: String) -> Bool {
        guard path.utf8.elementsEqual(TrustStoreSeal.fileName.utf8),
              let bytes = try? InputFile.readBeneath(rootFD, path, rootPath: root, what: "trust seal", limit: 16 << 20) else { return false }
        return TrustStoreSeal.parse(bytes) != nil
    }

    static func unlisted(_ onDisk: [String], _ manifest: Manifest) -> [String] {
        let files = manifest.files
        let sorted = files.indices.dropFirst().allSatisfy { ResourcePath.byteOrder(files[$0 - 1].path, files[$0].path) }
        guard sorted else {
            let known = Set(files.map { Array($0.path.utf8) })
            return onDisk.filter { !known.contains(Array($0.utf8)) }
        }
        var extra: [String] = []
        var listed = 0
        for path in onDisk {
            var order = 1
            while listed < files.count {
                order = ResourcePath.byteComparison(files[listed].path, path)
                if order >= 0 { break }
                listed += 1
            }
            if listed < files.count, order == 0 {
                listed += 1
            } else {
                extra.append(path)
            }
        }
        return extra
    }

    /// Every non-directory below the tree, relative, outside `.signet/`; links are listed, not
    /// followed. One folder at a time, each opened below the tree's descriptor (never through a
    /// link), without recursion: neither depth nor path length is limited.
    static func diskFiles(_ rootFD: Int32, root: String) throws -> [String] {
        try diskTree(rootFD, root: root).files
    }

    /// ``diskFiles(_:root:)``, every folder below the tree (outside `.signet/`) with its
    /// permission bits, as read through the descriptor the walk opened it with, and the folders
    /// below the root that could not be opened or listed (with why): the walk goes on without
    /// them, and the tree check reports each as `unreadable` (the files the manifest lists there
    /// get their own `unreadable` verdict). Only the root itself failing is an error.
    static func diskTree(_ rootFD: Int32, root: String) throws -> (files: [String], folders: [(path: String, mode: UInt32)], unreadable: [(path: String, reason: String)]) {
        var found: [String] = []
        var folders: [(path: String, mode: UInt32)] = []
        var unreadable: [(path: String, reason: String)] = []
        var pending: [String] = [""]
        while let prefix = pending.popLast() {
            let directory = prefix.isEmpty ? root : root + "/" + prefix
            let fd: Int32
            if prefix.isEmpty {
                fd = rootFD
            } else {
                switch Paths.open(prefix, beneath: rootFD, flags: O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) {
                case .success(let opened): fd = opened
                case .failure(let failure) where failure.code == ENOENT:
                    continue   // removed since it was listed: its files are missing, nothing to walk
                case .failure(let failure):
                    unreadable.append((prefix, SignetError.posix(failure, "cannot read directory", path: directory).reason))
                    continue
                }
                var info = stat()
                if fstat(fd, &info) == 0 { folders.append((prefix, UInt32(info.st_mode) & 0o7777)) }
            }
            defer { if fd != rootFD { close(fd) } }
            do {
                try DirectoryEntries.forEach(in: fd) { entry in
                    let name = entry.name
                    if prefix.isEmpty && name == TreeLayout.directory { return }
                    let relative = prefix.isEmpty ? name : prefix + "/" + name
                    // The directory entry says what it is on most filesystems; fstatat only when it does not.
                    var isDirectory = entry.isDirectory
                    if entry.typeUnknown {
                        var info = stat()
                        _ = try systemCall("fstatat") { fstatat(fd, entry.rawName, &info, AT_SYMLINK_NOFOLLOW) }
                        isDirectory = info.st_mode & S_IFMT == S_IFDIR
                    }
                    if isDirectory { pending.append(relative) } else { found.append(relative) }
                }
            } catch let failure as SystemCallFailure {
                guard !prefix.isEmpty else { throw SignetError.posix(failure, "cannot read directory", path: directory) }
                unreadable.append((prefix, SignetError.posix(failure, "cannot read directory", path: directory).reason))
            }
        }
        return (found, folders, unreadable)
    }

    /// Folders on disk: one that holds no file of the manifest is `added` (an empty folder, or
    /// one holding only added files); one whose mode is not 0755 is `mode-changed` (restored by
    /// `--repair`, once the manifest has verified).
    static func folderReports(_ folders: [(path: String, mode: UInt32)], manifest: Manifest, rootFD: Int32, options: ReverifyOptions) -> [FileReport] {
        let files = manifest.files
        // Whether the manifest lists a file below `folder`: in a manifest in byte order (what
        // pack writes) the paths starting with "folder/" are one run, found by binary search
        // (no set of 50,000 paths per check); otherwise a set of every signed folder.
        let inOrder = files.indices.dropFirst().allSatisfy { ResourcePath.byteOrder(files[$0 - 1].path, files[$0].path) }
        var signed = Set<[UInt8]>()
        if !inOrder {
            for file in files {
                var path = Array(file.path.utf8)
                while let slash = path.lastIndex(of: UInt8(ascii: "/")) {
                    path.removeSubrange(slash...)
                    guard signed.insert(path).inserted else { break }
                }
            }
        }
        func holdsSignedFile(_ folder: String) -> Bool {
            guard inOrder else { return signed.contains(Array(folder.utf8)) }
            let prefix = folder + "/"
            var low = 0, high = files.count
            while low < high {
                let middle = low + (high - low) / 2
                if ResourcePath.byteComparison(files[middle].path, prefix) < 0 { low = middle + 1 } else { high = middle }
            }
            return low < files.count && files[low].path.utf8.starts(with: prefix.utf8)
        }
        var reports: [FileReport] = []
        // A folder where the manifest lists a file is that file's report (`modified`); the set
        // of file paths is made only when a folder holds no signed file (rare).
        var listedFiles: Set<[UInt8]>? = nil
        for (path, mode) in folders where options.selects(path) {
            guard holdsSignedFile(path) else {
                if listedFiles == nil { listedFiles = Set(manifest.files.map { Array($0.path.utf8) }) }
                if listedFiles!.contains(Array(path.utf8)) { continue }
                reports.append(FileReport(path: path + "/", verdict: .added, detail: "'\(path)/' is a folder the signed manifest does not have", signatureSource: nil, signer: nil))
                continue
            }
            guard mode != 0o755 else { continue }
            let found = String(mode, radix: 8)
            if options.repair, case .success(let fd) = Paths.open(path, beneath: rootFD, flags: O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) {
                defer { close(fd) }
                if fchmod(fd, 0o755) == 0 {
                    reports.append(FileReport(path: path + "/", verdict: .repaired, detail: "'\(path)/' had mode \(found); restored to 0755", signatureSource: nil, signer: nil))
                    continue
                }
            }
            reports.append(FileReport(path: path + "/", verdict: .modeChanged, detail: "'\(path)/' has mode \(found), not 0755 (every installed folder is 0755); --repair restores it", signatureSource: nil, signer: nil))
        }
        return reports
    }

    /// The files below `DIR/.signet/`, relative to DIR ("" when it has none).
    static func signetFiles(_ rootFD: Int32, root: String) throws -> [String] {
        let fd: Int32
        switch Paths.open(TreeLayout.directory, beneath: rootFD, flags: O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) {
        case .success(let opened): fd = opened
        case .failure: return []
        }
        defer { close(fd) }
        return try diskTree(fd, root: root + "/" + TreeLayout.directory).files.map { TreeLayout.directory + "/" + $0 }
    }

    /// Files under `DIR/.signet/` that an install does not write: `added` (a tree check must not
    /// have a folder where anything can be put unnoticed).
    static func signetReports(_ files: [String], manifest: Manifest, options: ReverifyOptions) -> [FileReport] {
        guard !files.isEmpty, options.only.isEmpty else { return [] }
        let fixed: Set<[UInt8]> = Set([TreeLayout.manifest, TreeLayout.manifestSignature, TreeLayout.signatureRecord, TreeLayout.signatureRecordSignature, TreeLayout.signerCertificate].map { Array($0.utf8) })
        let others = files.filter { !fixed.contains(Array($0.utf8)) && TreeLayout.chainIndex(of: $0) == nil }
        // Sidecars and structured copies are looked up only when there are any (an xattr tree
        // has none): no set of every manifest path per check.
        guard !others.isEmpty else { return [] }
        var expected = Set<[UInt8]>()
        for file in manifest.files {
            expected.insert(Array(TreeLayout.signature(of: file.path).utf8))
            if file.structured != nil { expected.insert(Array(TreeLayout.structuredCopy(of: file.path).utf8)) }
        }
        return others.filter { !expected.contains(Array($0.utf8)) }.map {
            FileReport(path: $0, verdict: .added, detail: "'\($0)' is not a file an install writes under .signet/", signatureSource: nil, signer: nil)
        }
    }

    /// Whether `path` is a directory itself (not a link to one), for choosing between
    /// `verifyTree(at:policy:options:)` and `verifyFile(at:policy:)`. Paths of any length.
    public static func isDirectory(atPath path: String) -> Bool {
        guard let info = try? Paths.lstat(path) else { return false }
        return info.st_mode & S_IFMT == S_IFDIR
    }

    // MARK: Async

    /// ``verifyFile(at:policy:)`` on a thread of its own (not Swift concurrency's shared pool).
    public static func verifyFile(at path: String, policy: TrustPolicy) async -> FileReport {
        await OwnThreads.async { verifyFile(at: path, policy: policy) }
    }

    /// ``verifyTree(at:policy:options:)`` on threads of its own (not Swift concurrency's shared
    /// pool, which blocking file I/O would starve); cancelling the task stops it between files
    /// and throws `CancellationError`.
    public static func verifyTree(at root: String, policy: TrustPolicy, options: ReverifyOptions = ReverifyOptions()) async throws -> TreeReport {
        let cancelled = CancellationFlag()
        return try await withTaskCancellationHandler {
            try await OwnThreads.async { try verifyTree(at: root, policy: policy, options: options, cancelled: cancelled) }
        } onCancel: {
            cancelled.set()
        }
    }
}

/// A flag set once, read from any thread.
final class CancellationFlag: Sendable {
    private let value = Mutex(false)
    func set() { value.withLock { $0 = true } }
    var isSet: Bool { value.withLock { $0 } }
}

/// Checks one listed file of an installed tree (thread-safe: one instance serves all workers).
final class TreeChecker: @unchecked Sendable {
    // rootDescriptor is opened once and only read (openat) by the workers.
    let root: String
    private let rootDescriptor: Int32
    let manifest: Manifest
    let key: PublicKey
    let algorithm: SignatureAlgorithm
    let repair: Bool
    /// The tree's `.signet/signatures`, if it has one that fits the manifest.
    let record: SignatureRecord.Reader?
    let sawUnsupported = CancellationFlag()
    /// Key paths allowed to change, by the bytes of the structured resource's path (a rule for
    /// `Key.json` must not apply to its canonically equivalent twin `\u{212A}ey.json`).
    let allowedKeys: [[UInt8]: [KeyPath]]

    init(root: String, descriptor: Int32, manifest: Manifest, key: PublicKey, algorithm: SignatureAlgorithm, repair: Bool,
         record: SignatureRecord.Reader? = nil, allowedKeys: [String: [KeyPath]] = [:]) {
        self.record = record
        self.allowedKeys = Dictionary(allowedKeys.map { (Array($0.key.utf8), $0.value) }, uniquingKeysWith: +)
        self.root = root
        self.rootDescriptor = dup(descriptor)
        self.manifest = manifest
        self.key = key
        self.algorithm = algorithm
        self.repair = repair
    }

    deinit {
        if rootDescriptor >= 0 { close(rootDescriptor) }
    }

    /// What one worker thread reuses from file to file: a read buffer and hashing contexts.
    final class Workspace {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: InputFile.chunkSize, alignment: 64)
        private var hashers: [Digest.Hasher] = []
        private var hashing: DigestAlgorithm?
        let window = SignatureRecord.Reader.Window()

        deinit { buffer.deallocate() }

        /// SHA-256 (what the manifest lists) and, when the signatures use another, that one too;
        /// restarted for a new file.
        func hashers(for algorithm: DigestAlgorithm) throws -> [Digest.Hasher] {
            if hashing == algorithm {
                for hasher in hashers { try hasher.restart() }
            } else {
                hashers = try (algorithm == .sha256 ? [DigestAlgorithm.sha256] : [.sha256, algorithm]).map { try Digest.Hasher($0) }
                hashing = algorithm
            }
            return hashers
        }
    }

    /// Checks file number `position` of the manifest.
    func check(_ file: Manifest.File, at position: Int, in workspace: Workspace) -> FileReport {
        func report(_ verdict: FileVerdict, _ detail: String, _ source: SignatureSource? = nil) -> FileReport {
            FileReport(path: file.path, verdict: verdict, detail: detail, signatureSource: source, signer: verdict.isOK ? key.keyID : nil)
        }
        // Not fstat'ed on the way to a match: a read that stops short at exactly the signed size is
        // a regular file's end, and a matching file then shows user.signet.sig, which only regular
        // files and directories can carry (and a directory cannot be read). Every other outcome
        // asks fstat what the file is before it is reported.
        func differs() -> FileReport {
            var info = stat()
            guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return report(.modified, Self.notRegular(file.path)) }
            if let format = file.structured { return compareKeys(fd, file, format: format, at: position, in: workspace) }
            let size = UInt64(clamping: info.st_size)
            return report(.modified, "'\(file.path)' differs from the signed manifest (\(size == file.size ? "same size, other content" : "\(size) bytes, not \(file.size)"))")
        }
        let fd: Int32
        switch openBeneath(file.path) {
        case .success(let descriptor): fd = descriptor
        case .failure(let refusal): return report(refusal.verdict, refusal.detail)
        }
        defer { close(fd) }
        // The content against the signed manifest, through this descriptor: at most one byte more
        // than the signed size is read (a longer file differs; its length is for fstat to tell).
        let digests: [Digest]
        let size: UInt64
        do {
            let hashers = try workspace.hashers(for: algorithm.digest)
            let limit = file.size == .max ? file.size : file.size + 1
            var count: UInt64 = 0
            let descriptor = FileDescriptor(fd)
            while count < limit {
                let wanted = Int(min(UInt64(workspace.buffer.count), limit - count))
                let read = try descriptor.readChunk(into: UnsafeMutableRawBufferPointer(rebasing: workspace.buffer[0..<wanted]))
                if read == 0 { break }
                count += UInt64(read)
                if count > file.size { break }
                hashers.forEach { $0.update(UnsafeRawBufferPointer(rebasing: workspace.buffer[0..<read])) }
                // A short read of a regular file is its end: the read that would return 0 is
                // saved (one per file). Anything else that stops short is caught below.
                if read < wanted && count == file.size { break }
            }
            digests = try hashers.map { try $0.finalize() }
            size = count
        } catch let failure as SystemCallFailure {
            if !Self.isRegularFile(fd) { return report(.modified, Self.notRegular(file.path)) }
            return report(.unreadable, SignetError.posix(failure, "cannot read", path: root + "/" + file.path).reason)
        } catch {
            return report(.unreadable, (error as? SignetError)?.reason ?? "\(error)")
        }
        guard size == file.size, file.content.matches(digests[0]) else { return modeCheck(fd, file, differs()) }
        return modeCheck(fd, file, attributeCheck(fd, file, at: position, in: workspace, digest: digests.last!))
    }

    /// A file whose content and signature are right must also have the manifest's mode (the
    /// permission bits and no set-id or sticky bit): otherwise `mode-changed`, or with
    /// `--repair` the recorded mode is restored (fchmod on the checked descriptor) and the file
    /// is `repaired`. Other verdicts pass through.
    private func modeCheck(_ fd: Int32, _ file: Manifest.File, _ made: FileReport) -> FileReport {
        guard made.verdict.isOK else { return made }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return made }
        let mode = UInt32(info.st_mode) & 0o7777
        guard mode != file.mode.permissions else { return made }
        let found = String(mode, radix: 8), wanted = file.mode.rawValue
        func report(_ verdict: FileVerdict, _ detail: String) -> FileReport {
            var changed = FileReport(path: file.path, verdict: verdict, detail: detail, signatureSource: made.signatureSource, signer: verdict.isOK ? key.keyID : nil)
            changed.changedKeys = made.changedKeys
            return changed
        }
        guard repair else {
            return report(.modeChanged, "'\(file.path)' has mode \(found), not the signed manifest's \(wanted); --repair restores it")
        }
        guard fchmod(fd, mode_t(file.mode.permissions)) == 0 else {
            return report(.modeChanged, "'\(file.path)' has mode \(found), not \(wanted), and cannot be restored: \(String(cString: strerror(errno)))")
        }
        return report(.repaired, "'\(file.path)' had mode \(found); restored to the signed manifest's \(wanted)")
    }

    /// The verdict on the signature attributes of a file whose content is the signed one
    /// (`digest`, in the signature's algorithm): the attribute unpack installed, another valid
    /// signature, or lost (restored with --repair). `note` and `changes` describe a structured
    /// file whose allowed keys changed.
    private func attributeCheck(_ fd: Int32, _ file: Manifest.File, at position: Int, in workspace: Workspace, digest: Digest,
                                note: String? = nil, changes: [KeyChange] = []) -> FileReport {
        func report(_ verdict: FileVerdict, _ detail: String, _ source: SignatureSource? = nil) -> FileReport {
            var made = FileReport(path: file.path, verdict: verdict, detail: note.map { "\($0); \(detail)" } ?? detail, signatureSource: source, signer: verdict.isOK ? key.keyID : nil)
            made.changedKeys = changes
            return made
        }
        func annotated(_ made: FileReport) -> FileReport {
            var made = FileReport(path: made.path, verdict: made.verdict, detail: note.map { "\($0); \(made.detail)" } ?? made.detail, signatureSource: made.signatureSource, signer: made.signer)
            made.changedKeys = changes
            return made
        }
        // The key is the one the manifest verified with: a signature is valid when it is by that
        // key over this content (no policy to consult per file, no message to build).
        func verifies(_ signature: [UInt8]) -> Bool {
            signature.count == self.key.signatureLength && Verifier.check(signature, digest: digest, key: self.key, algorithm: self.algorithm)
        }
        // The tree's own copy of the signature (the record, else a sidecar file) is read only
        // when the attribute cannot vouch for the file: nil when it is absent, not a file or not
        // a signature of this content; a read error is an error, never taken for an absent sidecar.
        var validSidecar: Result<(bytes: [UInt8], source: SignatureSource)?, SignetError> {
            if let recorded = record?.signature(at: position), verifies(recorded) { return .success((recorded, .record)) }
            do {
                guard let bytes = try InputFile.readBeneath(rootDescriptor, TreeLayout.signature(of: file.path), rootPath: root, what: "sidecar signature", limit: 64 * 1024) else { return .success(nil) }
                return .success(verifies(bytes) ? (bytes, .sidecar) : nil)
            } catch let error as SignetError where error.code == .malformedInput {
                return .success(nil)
            } catch {
                return .failure(SignetError.posix(error, "cannot read the sidecar signature of", path: root + "/" + file.path))
            }
        }
        let attribute = ExtendedAttributes.get(ExtendedAttributes.signature, on: fd)
        // Without the attribute, the file may not be a regular file at all (an empty FIFO or
        // device reads as an empty file); the check above did not fstat it.
        if case .success(.some) = attribute {} else if !Self.isRegularFile(fd) {
            return report(.modified, Self.notRegular(file.path))
        }
        switch attribute {
        case .success(let attribute?):
            // The signature unpack installed, over content that matches the signed manifest.
            if let record, record.matches(attribute, at: position, through: workspace.window) {
                return report(.ok, note == nil ? "matches the signed manifest; user.signet.sig is the signature unpack installed" : "user.signet.sig is the signature unpack installed", .xattr)
            }
            if verifies(attribute) {
                return report(.ok, "verified", .xattr)
            }
            return annotated(restore(fd, file, sidecar: validSidecar,
                                     lost: "its user.signet.sig does not verify (replaced by another signature, truncated or extended)"))
        case .success(nil):
            for name in [IMASignature.userAttribute, IMASignature.securityAttribute] {
                if case .success(let bytes?) = ExtendedAttributes.get(name, on: fd), let ima = IMASignature(bytes: bytes),
                   ima.signatureAlgorithm == algorithm, verifies(ima.signature) {
                    return report(.ok, "verified from \(name)", .ima)
                }
            }
            return annotated(restore(fd, file, sidecar: validSidecar, lost: "its user.signet.sig attribute is gone"))
        case .failure(let failure) where failure.isUnsupported:
            sawUnsupported.set()
            switch validSidecar {
            case .success(let found?): return report(.ok, "verified from \(found.source == .record ? "the tree's record .signet/signatures" : "the sidecar") (no user xattrs on this filesystem)", found.source)
            case .success(nil): return report(.unsigned, "no user xattrs on this filesystem and no valid sidecar \(TreeLayout.signature(of: file.path))")
            case .failure(let error): return report(.unreadable, error.reason)
            }
        case .failure(let failure):
            return report(.unreadable, failure.error("read", attribute: ExtendedAttributes.signature, path: file.path).reason)
        }
    }

    /// The signed content of a structured resource: the tree's copy under `.signet/structured/`,
    /// parsed, once its size and SHA-256 are the manifest's; with the digests of the copy in
    /// `algorithms` when asked. A failure is a sentence for the report.
    static func signedContent(of file: Manifest.File, format: StructuredFormat, rootFD: Int32, root: String,
                              digest algorithm: DigestAlgorithm = .sha256) -> Result<StructuredValue, StructuredFailure> {
        signedCopy(of: file, format: format, rootFD: rootFD, root: root, digest: algorithm).map(\.value)
    }

    /// Why a structured comparison could not be made, for the report.
    struct StructuredFailure: Error {
        let reason: String
    }

    private static func signedCopy(of file: Manifest.File, format: StructuredFormat, rootFD: Int32, root: String,
                                   digest algorithm: DigestAlgorithm) -> Result<(value: StructuredValue, digest: Digest), StructuredFailure> {
        let relative = TreeLayout.structuredCopy(of: file.path)
        let bytes: [UInt8]
        do {
            guard let read = try InputFile.readBeneath(rootFD, relative, rootPath: root, what: "signed copy", limit: StructuredFormat.maximumSize) else {
                return .failure(.init(reason: "the tree has no signed copy (\(relative)) to compare its keys with; it was installed by a Signet without structured resources, or the copy was removed"))
            }
            bytes = read
        } catch {
            return .failure(.init(reason: "its signed copy \(relative) cannot be read: \((error as? SignetError)?.reason ?? "\(error)")"))
        }
        guard UInt64(bytes.count) == file.size, let sha256 = try? Digest.compute(bytes, algorithm: .sha256), file.content.matches(sha256) else {
            return .failure(.init(reason: "its signed copy \(relative) does not match the signed manifest (it was altered), so its keys cannot be compared"))
        }
        guard let digest = algorithm == .sha256 ? sha256 : try? Digest.compute(bytes, algorithm: algorithm) else {
            return .failure(.init(reason: "its signed copy \(relative) cannot be hashed"))
        }
        do {
            return .success((try format.parse(bytes), digest))
        } catch {
            return .failure(.init(reason: "its signed copy does not parse as \(format.rawValue): \(error)"))
        }
    }

    /// A structured resource whose bytes differ from the signed ones, compared key by key with
    /// the tree's signed copy: `ok` (with a note) when only allowed keys differ, else `modified`
    /// listing every changed, added and removed key path.
    private func compareKeys(_ fd: Int32, _ file: Manifest.File, format: StructuredFormat, at position: Int, in workspace: Workspace) -> FileReport {
        func modified(_ detail: String, _ changes: [KeyChange] = []) -> FileReport {
            var made = FileReport(path: file.path, verdict: .modified, detail: "'\(file.path)' differs from the signed manifest; \(detail)", signatureSource: nil, signer: nil)
            made.changedKeys = changes
            return made
        }
        let signed: (value: StructuredValue, digest: Digest)
        switch Self.signedCopy(of: file, format: format, rootFD: rootDescriptor, root: root, digest: algorithm.digest) {
        case .success(let copy): signed = copy
        case .failure(let failure): return modified(failure.reason)
        }
        // The file as it is now, through the descriptor that was checked (at most the limit).
        var bytes: [UInt8] = []
        do {
            var offset: Int64 = 0
            while true {
                let read = try FileDescriptor(fd).read(fullyAt: offset, into: workspace.buffer)
                if read == 0 { break }
                guard bytes.count + read <= StructuredFormat.maximumSize else {
                    return modified("it is now larger than the \(StructuredFormat.maximumSize) bytes a structured file is compared key by key up to")
                }
                bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: workspace.buffer[0..<read]))
                offset += Int64(read)
            }
        } catch {
            return FileReport(path: file.path, verdict: .unreadable, detail: SignetError.posix(error, "cannot read", path: root + "/" + file.path).reason, signatureSource: nil, signer: nil)
        }
        let current: StructuredValue
        do { current = try format.parse(bytes) } catch {
            return modified("it no longer parses as \(format.rawValue): \(error)")
        }
        let changes = StructuredValue.changes(from: signed.value, to: current, allowed: allowedKeys[Array(file.path.utf8)] ?? [])
        let refused = changes.filter { !$0.allowed }
        guard refused.isEmpty else {
            return modified("keys changed: \(refused.map(\.description).joined(separator: ", "))", changes)
        }
        let note = changes.isEmpty ? "'\(file.path)' holds the same keys and values as signed, formatted otherwise"
            : "keys-changed: \(changes.map(\.path.description).joined(separator: ", ")) (allowed); every other key of '\(file.path)' is as signed"
        return attributeCheck(fd, file, at: position, in: workspace, digest: signed.digest, note: note, changes: changes)
    }

    /// The content is right but the attribute is not: repair it from a verified sidecar if asked.
    private func restore(_ fd: Int32, _ file: Manifest.File, sidecar read: Result<(bytes: [UInt8], source: SignatureSource)?, SignetError>, lost: String) -> FileReport {
        let found: (bytes: [UInt8], source: SignatureSource)?
        switch read {
        case .success(let copy): found = copy
        case .failure(let error):
            return FileReport(path: file.path, verdict: .unreadable, detail: "'\(file.path)': \(lost), and \(error.reason)", signatureSource: nil, signer: nil)
        }
        guard let found else {
            return FileReport(path: file.path, verdict: .unsigned, detail: "'\(file.path)': \(lost), and the tree has no valid copy of its signature (.signet/signatures or \(TreeLayout.signature(of: file.path))) to restore it from", signatureSource: nil, signer: nil)
        }
        let sidecar = found.bytes
        let copy = found.source == .record ? TreeLayout.signatureRecord : TreeLayout.signature(of: file.path)
        guard repair else {
            return FileReport(path: file.path, verdict: .attributesLost, detail: "'\(file.path)' matches the signed manifest but \(lost); --repair restores it from \(copy)", signatureSource: found.source, signer: nil)
        }
        let meta: [UInt8]
        do { meta = try Installer.metadata(path: file.path, sha256: file.sha256, signer: key, manifest: manifest, algorithm: algorithm) } catch {
            return FileReport(path: file.path, verdict: .attributesLost, detail: (error as? SignetError)?.reason ?? "\(error)", signatureSource: found.source, signer: nil)
        }
        if case .failure(let failure) = ExtendedAttributes.set(ExtendedAttributes.signature, sidecar, on: fd) {
            return FileReport(path: file.path, verdict: .attributesLost, detail: failure.error("restore", attribute: ExtendedAttributes.signature, path: file.path).reason, signatureSource: found.source, signer: nil)
        }
        _ = ExtendedAttributes.set(ExtendedAttributes.metadata, meta, on: fd)
        return FileReport(path: file.path, verdict: .repaired, detail: "'\(file.path)': \(lost); restored from \(copy) after checking the content", signatureSource: found.source, signer: key.keyID)
    }

    /// Why a listed file could not be opened, as a verdict.
    struct OpenRefusal: Error {
        let verdict: FileVerdict
        let detail: String
        init(_ verdict: FileVerdict, _ detail: String) {
            self.verdict = verdict
            self.detail = detail
        }
    }

    /// The opened file and its size.
    private func openBeneath(_ relative: String) -> Result<Int32, OpenRefusal> {
        guard rootDescriptor >= 0 else { return .failure(OpenRefusal(.unreadable, "cannot open '\(root)'")) }
        func refusal(_ err: Int32) -> OpenRefusal {
            switch err {
            case ENOENT: OpenRefusal(.missing, "'\(relative)' is in the signed manifest but not on disk")
            case ELOOP, ENOTDIR, EXDEV: OpenRefusal(.modified, "'\(relative)' (or a directory on its path) was replaced by a symbolic link or another kind of file")
            default: OpenRefusal(.unreadable, "cannot open '\(relative)': \(String(cString: strerror(err)))")
            }
        }
        let fd: Int32
        switch Paths.open(relative, beneath: rootDescriptor) {
        case .success(let descriptor): fd = descriptor
        case .failure(let failure): return .failure(refusal(failure.code))
        }
        return .success(fd)
    }

    private static func isRegularFile(_ fd: Int32) -> Bool {
        var info = stat()
        return fstat(fd, &info) == 0 && info.st_mode & S_IFMT == S_IFREG
    }

    private static func notRegular(_ path: String) -> String { "'\(path)' is no longer a regular file" }
}

/// Where an installed file came from, from its attributes (informational: ``Reverifier``
/// decides whether it verifies).
public struct FileOrigin: Sendable {
    /// The file.
    public let path: String
    /// True when the file carries `user.signet.sig` or `user.signet.meta`, or the installed
    /// tree around it keeps its signature (filesystems without user attributes, bare trees).
    public let isInstalled: Bool
    /// True when the installed tree around it holds a sidecar signature for it.
    public let hasSidecar: Bool
    /// The package name, sequence, claimed key and path in the package, from `user.signet.meta`
    /// (or, without it, from the installed tree's manifest).
    public private(set) var packageName: String?
    /// The package version, from the installed tree's manifest when the file is inside one.
    public let version: String?
    /// The package sequence.
    public private(set) var sequence: UInt64?
    /// The key the metadata names.
    public private(set) var keyID: KeyID?
    /// The file's path inside the package.
    public private(set) var packagePath: String?
    /// The URL the package (or the file, for `fetch`) was downloaded from, when Signet
    /// downloaded it; informational, like the rest of `user.signet.meta`.
    public let source: String?

    /// Reads the attributes through one descriptor opened with O_NOFOLLOW.
    ///
    /// - Throws: ``SignetError`` when the file cannot be opened or its attributes or its tree's
    ///   manifest cannot be read (a filesystem without user attributes is not an error: the
    ///   file is then simply not installed by Signet).
    public init(path: String) throws {
        self.path = path
        let file = try InputFile.open(path, what: "file", followSymlinks: false)
        let meta = Reverifier.Metadata(file.descriptor.rawValue)
        var signature = false
        switch ExtendedAttributes.get(ExtendedAttributes.signature, on: file.descriptor.rawValue) {
        case .success(let value): signature = !(value ?? []).isEmpty
        case .failure(let failure) where failure.isUnsupported: break
        case .failure(let failure): throw failure.error("read", attribute: ExtendedAttributes.signature, path: path)
        }
        packageName = meta?.name
        sequence = meta?.sequence
        keyID = meta?.keyID
        packagePath = meta?.path
        source = meta?.source
        guard let (root, relative) = Reverifier.installedTree(containing: path) else {
            isInstalled = signature || meta != nil
            hasSidecar = false
            version = nil
            return
        }
        let sidecar = ((try? Reverifier.treeCopy(root: root, relative: relative)) ?? nil) != nil
        hasSidecar = sidecar
        // Informational: a manifest that does not parse names no version (a bare tree has none).
        let manifest = (try? readSmallFile(root + "/" + TreeLayout.manifest, what: "installed manifest", limit: 64 << 20)).flatMap { try? Manifest.parse($0) }
        version = manifest?.version
        // On a filesystem without user attributes the tree's manifest and sidecar say where
        // the file came from (as informational as the attribute would be).
        if meta == nil, sidecar, let manifest, let entry = manifest.files.first(where: { $0.path == relative }) {
            isInstalled = true
            packageName = manifest.name
            sequence = manifest.sequence
            keyID = manifest.keyID
            packagePath = entry.path
        } else {
            isInstalled = signature || meta != nil || sidecar
        }
    }
}
