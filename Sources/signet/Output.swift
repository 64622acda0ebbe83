import Foundation
import Signet
import Synchronization

/// Everything the CLI prints goes through here: JSON on stdout, text on stdout/stderr.
enum Output {
    /// Prints `value` as one JSON document (sorted keys) on stdout.
    /// The command's result: printed as JSON with `--json`, and always the last line of its
    /// events (`--events-fd`, `--events`).
    static func result<T: Encodable>(_ value: T, json wantsJSON: Bool) {
        if let events = Events.current {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            if let data = try? encoder.encode(value) { events.result(data) }
        }
        if wantsJSON { json(value) }
    }

    static func json<T: Encodable>(_ value: T) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes, .prettyPrinted]
        do {
            let data = try encoder.encode(value)
            FileHandle.standardOutput.write(data)
            FileHandle.standardOutput.write(Data("\n".utf8))
        } catch {
            Output.standardError("signet: could not encode the JSON output: \(error)\n")
        }
    }

    /// Writes text to stderr, unbuffered, exactly as given (callers escape what they interpolate).
    static func standardError(_ text: String) {
        FileHandle.standardError.write(Data(text.utf8))
    }

    /// One line on stdout. Control characters are escaped (`\n`, `\x1b`, `\u{202e}`), so a file
    /// named with ESC, CR or a newline cannot rewrite what the terminal shows.
    static func line(_ text: String) {
        if quiet {
            held.withLock { $0.append(escaped(text)) }
            return
        }
        print(escaped(text))
    }

    /// `--quiet`: the lines a command prints are held, and shown only if it fails
    /// (nothing on success; a failure still says what failed).
    nonisolated(unsafe) static var quiet = false
    private static let held = Mutex<[String]>([])

    /// Prints what `--quiet` held back (the command failed).
    static func releaseHeld() {
        let lines = held.withLock { lines in
            defer { lines = [] }; return lines
        }
        for line in lines { print(line) }
    }

    /// Several lines on stdout, each escaped as ``line(_:)`` does.
    static func lines(_ texts: [String]) {
        texts.forEach(line)
    }

    /// "signet: warning: ..." on stderr, one escaped line.
    static func warn(_ text: String) {
        Events.current?.warning(text)
        Output.standardError("signet: warning: \(escaped(text))\n")
    }

    /// "signet: error: ..." on stderr, one escaped line.
    static func error(_ text: String) {
        Output.standardError("signet: error: \(escaped(text))\n")
    }

    /// `text` with every character that could move the cursor, recolour, rewrite or reorder what a
    /// terminal shows written as an escape: C0 and C1 controls, DEL, and the Unicode bidirectional
    /// and line-separator controls. `keepNewlines` keeps line breaks (for help and usage text).
    static func escaped(_ text: String, keepNewlines: Bool = false) -> String {
        var out = ""
        out.unicodeScalars.reserveCapacity(text.unicodeScalars.count)
        for scalar in text.unicodeScalars {
            switch scalar.value {
            case 0x0A where keepNewlines: out.unicodeScalars.append(scalar)
            case 0x0A: out += "\\n"
            case 0x0D: out += "\\r"
            case 0x09: out += "\\t"
            case 0x00..<0x20, 0x7F: out += "\\x" + (scalar.value < 0x10 ? "0" : "") + String(scalar.value, radix: 16)
            case 0x80...0x9F, 0x200E, 0x200F, 0x2028, 0x2029, 0x202A...0x202E, 0x2066...0x2069, 0x061C:
                out += "\\u{" + String(scalar.value, radix: 16) + "}"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// The exit status of a command that checked several things: the most severe of their
    /// statuses, a verification failure (1) first, then untrusted (3), usage (2), malformed
    /// input (4) and the environment (5); 0 when all are 0 (FORMAT.md §4).
    static func mostSevere(_ statuses: [Int32]) -> Int32 {
        [1, 3, 2, 4, 5].first { statuses.contains($0) } ?? 0
    }

    /// The error document of FORMAT.md §4: every field present, null when it does not apply.
    struct ErrorBody: Encodable {
        let code: String
        let exit: Int32
        let message: String
        @Null var file: String?
        @Null var entry: String?
        @Null var openssl: [String]?
        /// The system or library call that failed, and the errno it set.
        @Null var call: String?
        @Null var errno: Int32?
    }

    struct ErrorDocument: Encodable {
        let error: ErrorBody
    }

    static func errorBody(_ error: SignetError) -> ErrorBody {
        ErrorBody(
            code: error.code.name, exit: error.code.exitStatus.rawValue, message: error.reason,
            file: error.path, entry: error.entry,
            openssl: error.openSSLErrors.isEmpty ? nil : error.openSSLErrors.reduce(into: [String]()) { if !$0.contains($1) { $0.append($1) } },
            call: error.call, errno: error.systemError)
    }

    /// Reports `error` (stderr always; stdout too with --json) and exits with its status.
    static func fail(_ error: SignetError, json wantsJSON: Bool, usage: String? = nil) -> Never {
        releaseHeld()
        result(ErrorDocument(error: errorBody(error)), json: wantsJSON)
        Output.error(error.description)
        // A value the command refused (exit 2): its usage, as for an option ArgumentParser refused.
        if let usage, error.code == .usage, !wantsJSON { Output.standardError(escaped(usage, keepNewlines: true) + "\n") }
        exit(error.code.exitStatus.rawValue)
    }

    /// Reports a command-line error (exit 2) in the one error style: `signet: error: MESSAGE`,
    /// then what ArgumentParser adds to its own first line (the option's help, the usage line).
    static func usageFailure(message: String, fullText: String, json wantsJSON: Bool) -> Never {
        let error = SignetError(.usage, message.isEmpty ? "invalid arguments" : ArgumentErrors.restyle(message))
        if wantsJSON { json(ErrorDocument(error: errorBody(error))) }
        var rest = fullText.split(separator: "\n", omittingEmptySubsequences: false)
        if let first = rest.first, first.hasPrefix("Error: ") { rest.removeFirst() }
        let more = rest.joined(separator: "\n").trimmingCharacters(in: .newlines)
        Output.standardError("signet: error: \(escaped(error.reason))\n" + (more.isEmpty ? "" : escaped(more, keepNewlines: true) + "\n"))
        exit(error.code.exitStatus.rawValue)
    }
}

/// The JSON document pack and inspect print: the manifest, how each file is stored, and (inspect
/// with keys) the verdict.
struct PackageReport: Encodable {
    struct File: Encodable {
        let path: String
        let size: UInt64
        let sha256: String
        let mode: String
        @Null var compression: String?
        @Null var compressed_size: UInt64?
        /// Whether the manifest gives the file a chunk index (FORMAT.md §2, `chunks`): an
        /// update then fetches only the parts it lacks (stored: by range; deflated: 8 KiB
        /// segments, `deflate`).
        let chunked: Bool
        /// "json" or "plist" for a resource packed with --structured.
        @Null var structured: String?
    }

    let package: String
    let name: String
    let version: String
    let sequence: UInt64
    let created: String
    @Null var expires: String?
    let algorithm: String
    let key_id: String
    let files: [File]
    @Null var verdict: String? = nil
    @Null var verified: Bool? = nil
    @Null var signer: String? = nil
    @Null var channel: String? = nil
    @Null var error: Output.ErrorBody? = nil

    /// - Parameter storage: how the archive keeps the file at a path, if it holds it.
    init(package: String, manifest: Manifest, storage: (String) -> (compression: StorageMethod, compressedSize: UInt64?)?) {
        self.package = package
        name = manifest.name
        version = manifest.version
        sequence = manifest.sequence
        created = manifest.created.rfc3339
        expires = manifest.expires?.rfc3339
        algorithm = manifest.algorithm.id
        key_id = manifest.keyID.hex
        files = manifest.files.map {
            let stored = storage($0.path)
            return File(
                path: $0.path, size: $0.size, sha256: $0.sha256, mode: $0.mode.rawValue,
                compression: stored?.compression.rawValue, compressed_size: stored?.compressedSize,
                chunked: $0.isChunked, structured: $0.structured?.rawValue)
        }
    }
}

/// An optional field of a JSON report that is written as `null` when absent, never left out
/// (FORMAT.md §4: optional fields are present as null), so that readers see one shape.
@propertyWrapper
struct Null<Value: Encodable>: Encodable {
    var wrappedValue: Value?

    init(wrappedValue: Value?) { self.wrappedValue = wrappedValue }

    func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        if let wrappedValue { try container.encode(wrappedValue) } else { try container.encodeNil() }
    }
}
