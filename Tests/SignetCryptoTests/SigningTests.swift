import Foundation
import Testing
@testable import SignetCore
@testable import SignetCrypto
import SignetTestSupport
import SignetCryptoTestSupport

@Suite("Signing and verification, and interop with the openssl CLI")
struct SigningTests {
    static let algorithms = SignatureAlgorithm.all

    @Test("digests stream across chunk boundaries and match openssl")
    func digests() throws {
        let directory = try TemporaryDirectory()
        // Three full chunks and a ragged tail, plus the empty file.
        let file = try directory.writeRandom("data", count: 3 * InputFile.chunkSize + 17)
        let empty = try directory.write("empty", Data())
        for path in [file, empty] {
            for (algorithm, flag) in [(DigestAlgorithm.sha256, "-sha256"), (.sha384, "-sha384"), (.sha512, "-sha512")] {
                let ours = try Digest.compute(fileAt: path, algorithm: algorithm)
                let theirs = try run("openssl", ["dgst", flag, "-r", path]).stdoutText.prefix(algorithm.size * 2)
                #expect(ours.hex == String(theirs), "\(algorithm) of \(path)")
            }
        }
        #expect(try Digest.compute(fileAt: empty, algorithm: .sha256).hex == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    }

    @Test("Signet's signatures verify with openssl dgst -verify", arguments: algorithms)
    func opensslVerifiesSignet(_ algorithm: SignatureAlgorithm) throws {
        let directory = try TemporaryDirectory()
        let file = try directory.writeRandom("resource.bin", count: 300_000)
        let signature = try Signer(key: Fixtures.signingKey(), algorithm: algorithm).sign(fileAt: file)
        #expect(signature.bytes.count == 256)
        let sigPath = try directory.write("resource.sig", Data(signature.bytes))
        let result = try run(
            "openssl",
            ["dgst"] + opensslDigestArguments(algorithm.id)
                + ["-verify", Fixtures.key("rsa2048-spki.pem"), "-signature", sigPath, file])
        #expect(result.status == 0, "\(algorithm): \(result.stdoutText) \(result.stderr)")
        #expect(result.stdoutText.contains("Verified OK"))
    }

    @Test("openssl's signatures verify with Signet; PKCS#1 v1.5 ones are byte-identical", arguments: algorithms)
    func signetVerifiesOpenSSL(_ algorithm: SignatureAlgorithm) throws {
        let directory = try TemporaryDirectory()
        let file = try directory.writeRandom("resource.bin", count: 123_457)
        let sigPath = directory.file("openssl.sig")
        let made = try run(
            "openssl",
            ["dgst"] + opensslDigestArguments(algorithm.id)
                + ["-sign", Fixtures.key("rsa2048-pkcs8.pem"), "-out", sigPath, file])
        #expect(made.status == 0, "\(made.stderr)")
        let theirs = Array(try contents(sigPath))
        let verifier = Verifier(policy: try Fixtures.trust("rsa2048-cert.der"))
        let result = try verifier.verify(signature: theirs, fileAt: file, algorithm: algorithm)
        #expect(result.isValid, "\(result.message)")
        #expect(result.signer?.keyID.hex == Fixtures.rsa2048KeyID)
        if !algorithm.isPSS {
            let ours = try Signer(key: Fixtures.signingKey(), algorithm: algorithm).sign(fileAt: file)
            #expect(ours.bytes == theirs, "PKCS#1 v1.5 is deterministic: same bytes as openssl")
        }
    }

    @Test("the same signature from every private key format")
    func allFormatsSignAlike() throws {
        let directory = try TemporaryDirectory()
        let file = try directory.writeRandom("r", count: 5000)
        let reference = try Signer(key: Fixtures.signingKey()).sign(fileAt: file).bytes
        for name in [
            "rsa2048-pkcs1.pem", "rsa2048-pkcs8.der", "rsa2048-pkcs1.der", "rsa2048-pkcs1-encrypted.pem",
            "rsa2048-pkcs8-encrypted.pem", "rsa2048-pkcs8-encrypted.der", "rsa2048.p12", "rsa2048-legacy.p12", "rsa2048-nopass.p12"
        ] {
            let key = try PrivateKey(contentsOf: Fixtures.key(name), passphrase: Fixtures.passphrase)
            #expect(try Signer(key: key).sign(fileAt: file).bytes == reference, "\(name)")
        }
    }

    @Test("a signature with trailing or missing bytes is invalid, and says why")
    func wrongLength() throws {
        let directory = try TemporaryDirectory()
        let file = try directory.writeRandom("r", count: 1000)
        let good = try Signer(key: Fixtures.signingKey()).sign(fileAt: file).bytes
        let verifier = Verifier(policy: try Fixtures.trust("rsa2048-spki.der"))
        #expect(try verifier.verify(signature: good, fileAt: file).isValid)
        for bad in [good + [0, 0], Array(good.dropLast()), Array(good.dropFirst()), [], good + good] {
            let result = try verifier.verify(signature: bad, fileAt: file)
            #expect(!result.isValid)
            #expect(result.failure == .wrongLength)
            #expect(result.message.contains("\(bad.count) bytes"))
            #expect(result.error(path: file)?.code.exitStatus.rawValue == 1)
        }
    }

    @Test("tampered content, another key, another algorithm: invalid")
    func invalid() throws {
        let directory = try TemporaryDirectory()
        let file = try directory.writeRandom("r", count: 10_000)
        let signature = try Signer(key: Fixtures.signingKey()).sign(fileAt: file).bytes
        var flipped = signature
        flipped[100] ^= 1
        let verifier = Verifier(policy: try Fixtures.trust("rsa2048-spki.der"))
        #expect(try verifier.verify(signature: flipped, fileAt: file).failure == .badSignature)
        #expect(try verifier.verify(signature: signature, fileAt: file, algorithm: .rsaPKCS1v15SHA512).failure == .badSignature)
        #expect(try verifier.verify(signature: signature, fileAt: file, algorithm: .rsaPSSSHA256).failure == .badSignature)
        var changed = Array(try contents(file))
        changed[5000] ^= 0x80
        try directory.write("r", Data(changed))
        let result = try verifier.verify(signature: signature, fileAt: file)
        #expect(result.failure == .badSignature)
        #expect(result.error(path: file)?.code == .badSignature)
        // Another trusted key of the same size does not make it verify.
        let other = Verifier(policy: try Fixtures.trust("other3072-spki.der"))
        #expect(try other.verify(signature: signature, fileAt: directory.writeRandom("s", count: 10)).failure == .wrongLength)
    }

    @Test("any one of several trusted keys may have signed; the report names it")
    func rotation() throws {
        let directory = try TemporaryDirectory()
        let file = try directory.writeRandom("r", count: 1000)
        let oldKey = try PrivateKey(contentsOf: Fixtures.key("other3072-pkcs8.pem"))
        let newSignature = try Signer(key: Fixtures.signingKey()).sign(fileAt: file).bytes
        let oldSignature = try Signer(key: oldKey).sign(fileAt: file).bytes
        let verifier = Verifier(policy: try Fixtures.trust("other3072-spki.der", "rsa2048-spki.der"))
        #expect(try verifier.verify(signature: newSignature, fileAt: file).signer?.keyID.hex == Fixtures.rsa2048KeyID)
        #expect(try verifier.verify(signature: oldSignature, fileAt: file).signer?.keyID == oldKey.keyID)
    }

    @Test("signing is deterministic and several files are signed in one call, in order")
    func batch() throws {
        let directory = try TemporaryDirectory()
        let files = try (0..<9).map { try directory.writeRandom("f\($0)", count: 1000 * ($0 + 1)) }
        let signer = Signer(key: try Fixtures.signingKey())
        let batch = try signer.sign(filesAt: files)
        #expect(batch.count == files.count)
        for (file, signature) in zip(files, batch) {
            #expect(try signer.sign(fileAt: file).bytes == signature.bytes)
        }
        // All or nothing: one unreadable input fails the whole batch.
        let error = signetError { _ = try signer.sign(filesAt: files + [directory.file("missing")]) }
        #expect(error?.code == .fileNotFound)
    }

    @Test("signature files: all-or-nothing writes that replace older signatures")
    func signatureFiles() throws {
        let directory = try TemporaryDirectory()
        let file = try directory.writeRandom("r", count: 100)
        let signature = try Signer(key: Fixtures.signingKey()).sign(fileAt: file)
        try directory.write("r.sig", Data("old".utf8))
        try SignatureFiles.write([signature], to: [directory.file("r.sig")])
        #expect(try SignatureFiles.read(directory.file("r.sig")) == signature.bytes)
        // A target in a missing directory fails before anything is replaced.
        try directory.write("a.sig", Data("keep".utf8))
        let error = signetError {
            try SignatureFiles.write([signature, signature], to: [directory.file("a.sig"), directory.file("nowhere/b.sig")])
        }
        #expect(error != nil)
        #expect(try contents(directory.file("a.sig")) == Data("keep".utf8))
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasPrefix(".") }
        #expect(leftovers.isEmpty, "staged files were removed: \(leftovers)")
    }
}

@Suite("Damaged keys and faulty signatures")
struct DamagedKeyTests {
    @Test("a private key with a bit flipped in its modulus (or a prime) is refused on load, as openssl pkey -check refuses it", arguments: [40, 300])
    func damagedKeyRefused(_ offset: Int) throws {
        let directory = try TemporaryDirectory()
        // rsa2048-pkcs1.der: 30 82 .. .. 02 01 00 02 82 01 01 00 <n: 256 bytes> 02 03 <e> 02 82 01 00 <d> ...
        var der = [UInt8](try contents(Fixtures.key("rsa2048-pkcs1.der")))
        der[offset] ^= 0x01
        let damaged = try directory.write("damaged.der", Data(der), mode: 0o600)
        let check = try run("openssl", ["pkey", "-inform", "DER", "-in", damaged, "-check", "-noout"])
        #expect(check.status != 0, "the peer refuses it too")
        let error = signetError { _ = try PrivateKey(contentsOf: damaged) }
        #expect(error?.code == .malformedKey, "\(error?.description ?? "loaded")")
        #expect(error?.reason.contains("damaged") == true)
    }

    /// The offsets of the integers of a DER RSAPrivateKey: version, n, e, d, p, q, dP, dQ, qInv.
    static func integers(of der: [UInt8]) -> [Range<Int>] {
        func length(at index: inout Int) -> Int {
            let first = Int(der[index]); index += 1
            guard first & 0x80 != 0 else { return first }
            var value = 0
            for _ in 0..<(first & 0x7f) { value = value << 8 | Int(der[index]); index += 1 }
            return value
        }
        var index = 1
        _ = length(at: &index) // the SEQUENCE
        var found: [Range<Int>] = []
        while index < der.count, der[index] == 0x02 {
            index += 1
            let count = length(at: &index)
            found.append(index..<index + count)
            index += count
        }
        return found
    }

    @Test(
        "a bit flipped in any number of the key (n, e, d, p, q, dP, dQ, qInv) is refused on load with the reason, as openssl pkey -check refuses it",
        arguments: ["n", "e", "d", "p", "q", "dP", "dQ", "qInv"])
    func everyNumberChecked(_ field: String) throws {
        let directory = try TemporaryDirectory()
        var der = [UInt8](try contents(Fixtures.key("rsa2048-pkcs1.der")))
        let fields = Self.integers(of: der)
        #expect(fields.count == 9, "version and eight numbers")
        let range = fields[["n", "e", "d", "p", "q", "dP", "dQ", "qInv"].firstIndex(of: field)! + 1]
        // The low bit of a byte in the middle: the encoding stays valid, the number changes.
        der[range.lowerBound + range.count / 2] ^= 0x01
        let damaged = try directory.write("damaged.der", Data(der), mode: 0o600)
        let check = try run("openssl", ["pkey", "-inform", "DER", "-in", damaged, "-check", "-noout"])
        #expect(check.status != 0, "the peer refuses it too")
        let error = signetError { _ = try PrivateKey(contentsOf: damaged) }
        #expect(error?.code == .malformedKey && error?.reason.contains("damaged") == true, "\(error?.description ?? "loaded")")
        // The intact key loads (the check does not refuse healthy keys).
        #expect(throws: Never.self) { _ = try PrivateKey(contentsOf: Fixtures.key("rsa2048-pkcs1.der")) }
    }

    @Test("every signature made is verified with the public half before it is returned")
    func signaturesAreVerified() throws {
        // The healthy key signs, and its signatures verify: the guard does not get in the way.
        let signer = Signer(key: try Fixtures.signingKey())
        for algorithm in SignatureAlgorithm.all {
            let signature = try Signer(key: signer.key, algorithm: algorithm).sign(Array("x".utf8))
            #expect(Verifier.check(signature.bytes, digest: signature.digest, key: signer.key.publicKey, algorithm: algorithm))
        }
    }
}

@Suite("Caller mistakes are reported, not trapped on")
struct CallerMistakeTests {
    @Test("a digest of another algorithm than the scheme is a verdict, not a crash")
    func digestMismatch() throws {
        let key = try Fixtures.signingKey()
        let signature = try Signer(key: key).sign(Array("x".utf8))
        let sha512 = try Digest.compute(Array("x".utf8), algorithm: .sha512)
        let result = Verifier(policy: TrustPolicy(keys: [key.publicKey])).verify(signature: signature.bytes, digest: sha512, algorithm: .default)
        #expect(result.failure == .digestMismatch)
        #expect(!result.isValid)
    }
}
