import SignetCore
import SignetCrypto

extension Manifest {
    /// The trusted key and algorithm whose signature over the manifest bytes, as stored, verifies.
    /// Every supported algorithm is tried, so nothing in the unverified bytes is believed first.
    package static func signer(of bytes: [UInt8], signature: [UInt8], policy: TrustPolicy) throws -> (PublicKey, SignatureAlgorithm)? {
        for algorithm in SignatureAlgorithm.all {
            let digest = try Digest.compute(bytes, algorithm: algorithm.digest)
            if let key = Verifier(policy: policy).verify(signature: signature, digest: digest, algorithm: algorithm).signer {
                return (key, algorithm)
            }
        }
        return nil
    }
}
