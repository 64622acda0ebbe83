#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import SignetCore

/// A witness (c2sp.org/tlog-witness): for each log it knows, the latest checkpoint it cosigned,
/// kept in a folder; `add-checkpoint` cosigns a newer checkpoint only when a consistency proof
/// shows it extends that one. Its answers are the protocol's: 404 (unknown log), 403 (no
/// signature of the log's verifies), 400 (a malformed request, or an old size above the new),
/// 409 (the old size is not the one it holds, with that size as `text/x.tlog.size`; or the
/// same size with another root hash), 422 (the proof does not verify), 200 and the cosignature.
public struct TransparencyWitness: Sendable {
    /// An HTTP answer: status, content type, body.
    public struct Answer: Sendable, Equatable {
        public let status: Int
        public let contentType: String
        public let body: [UInt8]

        static func text(_ status: Int, _ message: String) -> Answer {
            Answer(status: status, contentType: "text/plain; charset=utf-8", body: Array((message + "\n").utf8))
        }
    }

    public let key: NoteSignerKey
    public let logs: [NoteVerifierKey]
    /// The folder of latest cosigned checkpoints, one file per log.
    public let stateDirectory: String

    /// Largest request body read.
    public static let largestRequest = 64 << 10

    public init(key: NoteSignerKey, logs: [NoteVerifierKey], stateDirectory: String) throws {
        guard key.verifier.type == .cosignatureV1 else { throw SignetError(.usage, "a witness signs with a cosigner key (type 0x04)") }
        (self.key, self.logs, self.stateDirectory) = (key, logs, stateDirectory)
    }

    /// Handles one `add-checkpoint` request body at `now` (POSIX seconds). The check of the old
    /// size and the record of the new checkpoint are one step for a caller that serves one
    /// request at a time (`signet witness serve` does).
    public func addCheckpoint(_ body: [UInt8], now: UInt64) -> Answer {
        guard body.count <= Self.largestRequest else { return .text(400, "the request is longer than \(Self.largestRequest) bytes") }
        // old N, proof lines, a blank line, the checkpoint.
        guard let blank = body.indices.dropLast().first(where: { body[$0] == 0x0a && body[$0 + 1] == 0x0a }),
            let head = String(validating: body[..<blank], as: UTF8.self)
        else { return .text(400, "no blank line after the old size and proof") }
        var lines = head.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard let first = lines.first, first.hasPrefix("old "), let old = Self.decimal(String(first.dropFirst(4))) else {
            return .text(400, "the first line is not `old SIZE`")
        }
        lines.removeFirst()
        guard lines.count <= 63 else { return .text(400, "more than 63 proof lines") }
        var proof: [[UInt8]] = []
        for line in lines {
            guard let hash = [UInt8](base64: line), hash.count == 32 else { return .text(400, "a proof line is not a base64 SHA-256 hash") }
            proof.append(hash)
        }
        let note = Array(body[(blank + 2)...])
        guard let text = String(validating: note, as: UTF8.self), let origin = text.split(separator: "\n", maxSplits: 1).first.map(String.init) else {
            return .text(400, "the checkpoint is not UTF-8")
        }
        let known = logs.filter { $0.name == origin }
        guard !known.isEmpty else { return .text(404, "this witness does not know the log '\(origin)'") }
        let opened: SignedNote
        do {
            opened = try SignedNote.open(note, known: known)
        } catch let error as SignetError {
            return .text(error.code == .malformedInput ? 400 : 403, error.reason)
        } catch {
            return .text(400, "\(error)")
        }
        guard let checkpoint = try? Checkpoint(text: opened.text), checkpoint.origin == origin else { return .text(400, "not a checkpoint") }
        guard old <= checkpoint.size else { return .text(400, "the old size \(old) is above the checkpoint's \(checkpoint.size)") }
        guard old > 0 || proof.isEmpty else { return .text(400, "a proof from size 0") }
        let stored: Checkpoint?
        do {
            stored = try storedCheckpoint(origin)
        } catch let error as SignetError {
            return .text(500, error.reason)
        } catch {
            return .text(500, "\(error)")
        }
        let storedSize = stored?.size ?? 0
        guard old == storedSize else { return Answer(status: 409, contentType: "text/x.tlog.size", body: Array("\(storedSize)\n".utf8)) }
        if let stored, old == checkpoint.size {
            guard stored.rootHash == checkpoint.rootHash else { return .text(409, "the checkpoint has the size this witness holds and another root hash") }
        } else if let stored {
            guard checkpoint.size <= UInt64(Int.max),
                TileTree.verifyConsistency(old: Int(old), new: Int(checkpoint.size), oldRoot: stored.rootHash, newRoot: checkpoint.rootHash, proof: proof)
            else { return .text(422, "the consistency proof from \(old) to \(checkpoint.size) does not verify") }
        }
        do {
            try AtomicFile.write(Array(checkpoint.text.utf8), to: statePath(origin), mode: 0o600, replace: true)
            let cosigned = try SignedNote.cosign(note, by: [key], time: now)
            return Answer(status: 200, contentType: "text/plain; charset=utf-8", body: Array(cosigned[note.count...]))
        } catch let error as SignetError {
            return .text(500, error.reason)
        } catch {
            return .text(500, "\(error)")
        }
    }

    /// The latest checkpoint this witness cosigned for `origin`; nil when it cosigned none. A
    /// record it cannot read is an error, never a log it has not seen (that would let the log
    /// roll back).
    public func storedCheckpoint(_ origin: String) throws -> Checkpoint? {
        let path = statePath(origin)
        guard FileManager.default.fileExists(atPath: path) || (try? FileManager.default.destinationOfSymbolicLink(atPath: path)) != nil else { return nil }
        let bytes = try InputFile.open(path, what: "the witness's record", followSymlinks: false).readAll(limit: 4096, what: "the witness's record")
        guard let text = String(validating: bytes, as: UTF8.self) else { throw SignetError(.malformedInput, "the witness's record is not UTF-8", path: path) }
        return try Checkpoint(text: text)
    }

    func statePath(_ origin: String) -> String {
        stateDirectory + "/" + TileTree.sha256(Array(origin.utf8)).map { String(format: "%02x", $0) }.joined() + ".checkpoint"
    }

    static func decimal(_ text: String) -> UInt64? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), text == "0" || !text.hasPrefix("0") else { return nil }
        return UInt64(text)
    }
}
