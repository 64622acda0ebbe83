import Foundation
import Synchronization
internal import SystemPackage
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore
import SignetCrypto
import SignetManifest

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
    /// Read fs-verity files whole as well. Without it, an fs-verity file whose
    /// kernel-measured digest is the signed manifest's is not read: the kernel checks each of
    /// its blocks whenever it is read, and a block changed under it is found at that read.
    /// With it, every byte is read (through the kernel's checks), so such a block is found now.
    public var readVerityFiles = false
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
            SignetError(
                .usage,
                "rules file '\(path)': \(reason); a rules file is a JSON object with \"exclude\", \"only\" and \"allow_keys\" (see signet help reverify)",
                path: path)
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
                        guard let keyPath = KeyPath(text) else {
                            throw wrong("\"\(text)\" in allow_keys.\(file.text) is not a key path (dotted keys such as server.url or items.*.name)")
                        }
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
                throw SignetError(
                    .usage,
                    "--only '\(selector)' is not a subtree of the installed tree: \(refusal.reason); give a path relative to '\(root)', e.g. --only bin",
                    path: root)
            }
            guard manifest.files.contains(where: { $0.path == trimmed || $0.path.hasPrefix(trimmed + "/") }) else {
                throw SignetError(
                    .usage,
                    "--only '\(selector)' matches no file in the signed manifest of '\(root)'; check the spelling (paths are relative to the tree, e.g. --only bin)",
                    path: root)
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
    func checkAllowedKeys(against manifest: Manifest, rootFD: FileDescriptor, root: String) throws {
        guard !allowedKeys.isEmpty else { return }
        // By bytes, as the tree check looks them up.
        var listed: [[UInt8]: Manifest.File] = [:]
        let wanted = Set(allowedKeys.keys.map { Array($0.utf8) })
        for file in manifest.files where wanted.contains(Array(file.path.utf8)) { listed[Array(file.path.utf8)] = file }
        for (path, keys) in allowedKeys.sorted(by: { ResourcePath.byteOrder($0.key, $1.key) }) {
            guard let file = listed[Array(path.utf8)] else {
                throw SignetError(
                    .usage,
                    "an allowed key names '\(path)', which is not in the signed manifest of '\(root)'; give the path relative to the tree (e.g. config/app.json:server.url)",
                    path: root)
            }
            guard let format = file.structured else {
                throw SignetError(
                    .usage,
                    "an allowed key names '\(path)', which was not packed as structured (pack --structured) and so is compared byte for byte; pack it with --structured to allow keys to change",
                    path: root)
            }
            guard let signed = try? TreeChecker.signedContent(of: file, format: format, rootFD: rootFD, root: root).get() else { continue }
            for key in keys where !signed.contains(key) {
                throw SignetError(
                    .usage,
                    "the allowed key '\(key)' names nothing in the signed '\(path)' of '\(root)'; check the spelling (keys are joined by '.', array elements are numbers or '*')",
                    path: root)
            }
        }
    }

    /// Whether the tree holds the expected package (`expectedName`, `stateFile`): nil when it
    /// does, else the failure and its message. `name` and `sequence` are nil for a bare tree.
    func expectationFailure(name: String?, sequence: UInt64?, root: String) throws -> (PackageFailure, String)? {
        let holds = name.map { "package '\($0)' sequence \(sequence ?? 0)" } ?? "a bare tree (no name)"
        if let expectedName, !Manifest.sameName(expectedName, name) {
            return (.otherPackage, "'\(root)' holds \(holds), not package '\(expectedName)' (--expect-name)")
        }
        guard let stateFile else { return nil }
        let state = try InstallState.read(stateFile)
        if let recorded = state.destinations[InstallState.key(for: root)] {
            if recorded.kind == "manifest", name == nil {
                return (
                    .relabelled,
                    "'\(root)' was installed from the signed package '\(recorded.name ?? "?")' sequence \(recorded.sequence ?? 0) (recorded in '\(stateFile)'), but is now a bare tree: its manifest or manifest signature was removed. Reinstall the package"
                )
            }
            if recorded.kind == "manifest", !Manifest.sameName(recorded.name, name) {
                return (
                    .otherPackage,
                    "'\(root)' holds \(holds), but '\(stateFile)' records package '\(recorded.name ?? "?")' there: the tree was replaced by another product"
                )
            }
        }
        if let name, let sequence, let highest = state.sequences[name], sequence < highest,
            state.destinations[InstallState.key(for: root)]?.rolledBack(to: name, sequence: sequence) != true
        {
            // `signet rollback` without --state: its own record beside DIR (ours, written under
            // DIR's lock) says this release was swapped back on purpose.
            if let record = try? ReleaseRecord.read(for: root), let last = record.last_rollback, last.to == sequence, last.from > sequence {
                return nil
            }
            return (
                .rollback,
                "'\(root)' holds \(name) sequence \(sequence), but sequence \(highest) was installed before (recorded in '\(stateFile)'), and no `signet rollback` of it is recorded beside it: the tree was rolled back to an older release"
            )
        }
        return nil
    }

    func selects(_ path: String) -> Bool {
        if !only.isEmpty,
            !only.contains(where: { selector in
                let subtree = Self.subtree(selector)
                return path == subtree || path.hasPrefix(subtree + "/")
            })
        {
            return false
        }
        return !exclude.contains { ResourcePath.matches(pattern: $0, path) }
    }
}
