import Foundation
import SignetCore
import SignetCrypto
import SignetNetwork

/// Gathers cosignatures on a log's new checkpoint from the witnesses of a policy over
/// c2sp.org/tlog-witness (`POST <prefix>/add-checkpoint`), in the policy's order, until its
/// quorum is met. A witness that holds another size answers 409 with it: the request is made
/// again from that size (with the consistency proof from it), once. Cosignatures are verified
/// with the witness's key before they count; plain http:// is accepted, since nothing but a
/// verified signature is taken from the answer.
struct WitnessClient {
    let log: TransparencyLog
    let policy: TransparencyPolicy
    let download: DownloadOptions

    init(log: TransparencyLog, policy: TransparencyPolicy, download: DownloadOptions) {
        self.log = log
        self.policy = policy
        var options = download
        options.tls.allowHTTP = true
        options.maxTime = min(options.maxTime, 60)
        self.download = options
    }

    /// `note` (the checkpoint signed by the log) with the cosignatures gathered, the witnesses
    /// that gave them, and why each other one did not. Throws `.thresholdNotMet` when the
    /// quorum is not met: the checkpoint must not be published.
    mutating func cosign(_ note: [UInt8], checkpoint: Checkpoint) throws -> (note: [UInt8], cosigners: [String], refusals: [String]) {
        var cosigned = note
        var names: [String] = []
        var keys: [NoteVerifierKey] = []
        var refusals: [String] = []
        for witness in policy.witnesses where !policy.isMet(by: keys) {
            guard let url = witness.url else {
                refusals.append("\(witness.name): the policy gives no URL for it")
                continue
            }
            do {
                let lines = try request(witness, url: url, note: note, checkpoint: checkpoint)
                cosigned += lines
                names.append(witness.name)
                keys.append(witness.key)
            } catch let error as SignetError {
                refusals.append("\(witness.name): \(error.reason)")
            }
        }
        guard policy.isMet(by: keys) else {
            throw SignetError(
                .thresholdNotMet,
                "the witnesses' quorum is not met for the log's checkpoint of \(checkpoint.size) entries (cosigned by \(names.isEmpty ? "none" : names.joined(separator: ", "))): \(refusals.joined(separator: "; ")). Nothing was published: run `signet log append` again when the witnesses answer"
            )
        }
        return (cosigned, names, refusals)
    }

    /// One witness's cosignature lines, verified.
    private func request(_ witness: TransparencyPolicy.Witness, url: String, note: [UInt8], checkpoint: Checkpoint) throws -> [UInt8] {
        let fetcher = BoundedFetcher(options: download, cancelled: nil)
        let endpoint = (url.hasSuffix("/") ? String(url.dropLast()) : url) + "/add-checkpoint"
        var old: UInt64 = 0
        for attempt in 0..<2 {
            let proof = old > 0 && old < checkpoint.size ? log.tree.consistencyProof(old: Int(old), new: Int(checkpoint.size)) : []
            let body = Array(("old \(old)\n" + proof.map { Data($0).base64EncodedString() + "\n" }.joined() + "\n").utf8) + note
            let answer = try fetcher.post(endpoint, body: body, contentType: "text/plain; charset=utf-8", limit: 64 << 10, what: "the checkpoint")
            let text = String(decoding: answer.body.prefix(300), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            switch answer.status {
            case 200:
                // Only this witness's signatures, checked over the checkpoint.
                let opened = try SignedNote.open(note + answer.body, known: [witness.key])
                guard opened.verifiedBy.contains(witness.key) else { throw SignetError(.untrustedSigner, "its answer has no cosignature by its key") }
                return Self.lines(of: answer.body, signedBy: witness.key)
            case 409 where attempt == 0:
                guard let size = UInt64(text), size != old, size <= checkpoint.size else {
                    throw SignetError(
                        .network,
                        "409 Conflict: it holds \(text.isEmpty ? "another checkpoint" : "'\(text)'") (a checkpoint of the same size with another root hash, or a size above this log's)"
                    )
                }
                old = size
            default:
                throw SignetError(.network, "HTTP \(answer.status)\(text.isEmpty ? "" : ": \(text)")")
            }
        }
        throw SignetError(.network, "409 Conflict twice")
    }

    /// The signature lines of `answer` by `key` (a witness's answer may carry others).
    static func lines(of answer: [UInt8], signedBy key: NoteVerifierKey) -> [UInt8] {
        let text = String(decoding: answer, as: UTF8.self)
        return Array(text.split(separator: "\n").filter { $0.hasPrefix("— \(key.name) ") }.map { $0 + "\n" }.joined().utf8)
    }
}
